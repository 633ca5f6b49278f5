#!/usr/bin/env bash
# The "opreg-kernels[triton] on a GPU host" path, as a user takes it, on a machine without
# network whose python3 already has torch and Triton:
#
#   hatch run dist:build && bash benchmarks/gpu/fetch_wheels.sh   # on a machine with network
#   bash benchmarks/gpu/run_installed.sh                           # on the GPU host (dist/ and
#                                                                  # build/gpu-wheels copied over)
#
# Installs the built wheels from dist/ (pytest and hypothesis from build/gpu-wheels) into a
# fresh venv that sees the system's torch and Triton, resolves opreg-kernels[triton] against
# them, then runs `opreg check opreg_kernels` (every device present) and the downstream
# example's tests on CUDA. Logs go to $OUT (default benchmarks/gpu/out). Exit 0 if all passed.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root="$PWD"
OUT="${OUT:-$root/benchmarks/gpu/out}"
mkdir -p "$OUT"
py="${PYTHON:-python3}"
venv="${TMPDIR:-/tmp}/opreg-installed"
unset TRITON_INTERPRET OPREG_DISABLE_TRITON PYTHONPATH
status=0
run() {  # run NAME COMMAND...: log to $OUT/NAME.log, record the exit status
  local name=$1 start=$SECONDS
  shift
  echo "=== $name: $*"
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc ($((SECONDS - start)) s)" | tee -a "$OUT/installed_summary.txt"
  tail -n 30 "$OUT/$name.log"
  [ "$rc" -eq 0 ] || status=1
}
: > "$OUT/installed_summary.txt"
rm -rf "$venv"
run venv "$py" -m venv "$venv"
# The venv sees the system python's packages (torch, Triton), wherever they are installed
# (a system python or a venv of its own), so pip resolves the requirements against them.
"$py" -c "import site, sys; print('\n'.join(site.getsitepackages() + [site.getusersitepackages()]))" \
  > "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/system-site.pth"
run install "$venv/bin/python" -m pip install --no-index --find-links "$root/dist" \
  --find-links "$root/build/gpu-wheels" "opreg-kernels[triton]" opreg-testing pytest hypothesis
run versions "$venv/bin/python" -c "import sys, torch, triton, opreg_core, opreg_kernels, opreg_testing as t
print(sys.version.split()[0], torch.__version__, triton.__version__, opreg_kernels.has_triton())
print([m.__file__ for m in (opreg_core, opreg_kernels)], t.__version__)"
run check bash -c "cd '${TMPDIR:-/tmp}' && '$venv/bin/opreg' check opreg_kernels"
run check_json bash -c "cd '${TMPDIR:-/tmp}' && '$venv/bin/opreg' check opreg_kernels --json -q"
run downstream bash -c "cd '$root/examples/downstream' && '$venv/bin/python' -m pytest \
  -p no:cacheprovider -ra --opreg-device cpu --opreg-device cuda"
exit "$status"
