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
# example's tests on CUDA. Logs go to $OUT (default benchmarks/results/gpu/out). Exit 0 if all passed.
SUMMARY_FILE=installed_summary.txt
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
venv="${TMPDIR:-/tmp}/opreg-installed"
unset PYTHONPATH  # the installed wheels, not this checkout
rm -rf "$venv"
step venv 900 "$py" -m venv "$venv"
# The venv sees the system python's packages (torch, Triton), wherever they are installed
# (a system python or a venv of its own), so pip resolves the requirements against them.
"$py" -c "import site, sys; print('\n'.join(site.getsitepackages() + [site.getusersitepackages()]))" \
  > "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/system-site.pth"
step install 900 "$venv/bin/python" -m pip install --no-index --find-links "$root/dist" \
  --find-links "$root/build/gpu-wheels" "opreg-kernels[triton]" opreg-testing pytest hypothesis
step versions 900 "$venv/bin/python" -c "import sys, torch, triton, opreg_core, opreg_kernels, opreg_testing as t
print(sys.version.split()[0], torch.__version__, triton.__version__, opreg_kernels.has_triton())
print([m.__file__ for m in (opreg_core, opreg_kernels)], t.__version__)"
step check 900 bash -c "cd '${TMPDIR:-/tmp}' && '$venv/bin/opreg' check opreg_kernels"
step check_json 900 bash -c "cd '${TMPDIR:-/tmp}' && '$venv/bin/opreg' check opreg_kernels --json -q"
step downstream 900 bash -c "cd '$root/examples/downstream' && '$venv/bin/python' -m pytest \
  -p no:cacheprovider -ra --opreg-device cpu --opreg-device cuda"
finish
