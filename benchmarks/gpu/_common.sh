# Shared by the GPU-host scripts of this folder (sourced, not run): the repository root, $OUT,
# the Python to use, a record of the environment, pytest from local wheels, and `step`, which
# runs one command under a time limit, logs it and records its exit status.
#
# After sourcing: $root, $OUT (created; default $OUT_DEFAULT or benchmarks/results/gpu/out), $py
# ($PYTHON or python3), $wheels ($OPREG_GPU_WHEELS or build/gpu-wheels), $status (0, set to 1
# by a failed step) and $summary ($SUMMARY_FILE or summary.txt in $OUT, emptied: each step's
# outcome is appended to it). The variables
# that change what opreg does (TRITON_INTERPRET, OPREG_DISABLE_TRITON, OPREG_VMAP_*) are unset:
# GPU runs measure the defaults unless a step sets one.

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root="$PWD"
OUT="${OUT:-${OUT_DEFAULT:-$root/benchmarks/results/gpu/out}}"
mkdir -p "$OUT"
py="${PYTHON:-python3}"
wheels="${OPREG_GPU_WHEELS:-$root/build/gpu-wheels}"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
unset TRITON_INTERPRET OPREG_DISABLE_TRITON OPREG_VMAP_SHORT_PATH OPREG_VMAP_NOGRAD_OP
status=0
summary="$OUT/${SUMMARY_FILE:-summary.txt}"
: > "$summary"

use_source_tree() {  # import the three packages from this checkout, not from an install
  export PYTHONPATH="$root/packages/opreg-core/src:$root/packages/opreg-kernels/src:$root/packages/opreg-testing/src${PYTHONPATH:+:$PYTHONPATH}"
}

record_environment() {  # record_environment [PYTHON_LINES]: $OUT/environment.txt, also printed
  {
    date -u
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv || true
    "$py" - <<PY
import platform, shutil, sys
import torch
print("python", sys.version.split()[0], platform.machine(), platform.processor())
print("torch", torch.__version__, "cuda", torch.version.cuda)
try:
    import triton
    print("triton", triton.__version__)
except Exception as exc:
    print("triton import failed:", exc)
print("gpus", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
print("c++ compiler", shutil.which("g++") or shutil.which("c++"))
${1:-}
PY
  } > "$OUT/environment.txt" 2>&1
  cat "$OUT/environment.txt"
}

ensure_test_tools() {  # pytest and hypothesis, from $wheels into a scratch folder if missing
  if ! "$py" -c "import pytest, hypothesis" 2>/dev/null; then
    local site="${TMPDIR:-/tmp}/opreg-gpu-site"
    echo "pytest or hypothesis missing: installing them from $wheels into $site"
    "$py" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$wheels" \
      --target "$site" pytest hypothesis && export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$site"
  fi
  # The tests use the opreg-testing plugin; without the installed package's entry point, load it.
  pytest_args=(-p no:cacheprovider -ra)
  if ! "$py" -c "import importlib.metadata as m, sys; sys.exit(not any(e.value.startswith('opreg_testing') for e in m.entry_points(group='pytest11')))"; then
    pytest_args+=(-p opreg_testing.plugin)
  fi
}

step() {  # step NAME TIMEOUT_S COMMAND...: log to $OUT/NAME.log, record the exit status
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc ($((SECONDS - start)) s)" | tee -a "$summary"
  tail -n 30 "$OUT/$name.log"
  [ "$rc" -eq 0 ] || status=1
}

finish() {  # print the summary and exit with the overall status
  echo "=== summary"
  cat "$summary"
  exit "$status"
}
