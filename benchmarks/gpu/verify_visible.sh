#!/usr/bin/env bash
# Compiler-visible Triton ops and AOTInductor packages on a CUDA GPU (issue 13, parts 1 and 2),
# in one command (torch and Triton preinstalled, no network):
#
#   OUT=/some/dir bash benchmarks/gpu/verify_visible.sh [STEP...]   (default: tests bench)
#
# tests  the CUDA tests of the mode and of AOTInductor (tests/kernels/test_compiler_visible.py,
#        tests/kernels/test_aot_inductor.py: generated code launching the kernels, compiled
#        vmap/grad/checks, the bare-launcher refusal, philox twins bit-identical, .pt2 packages
#        in fresh processes with and without opreg, a plain-torch package as the control, the
#        CPU package), fused_add's own tests (its launcher changed), and the private-boundary
#        check on this torch. About 5-6 minutes on the H200 host (each CUDA package ~1 min).
#        Within a 10-minute command limit, run `tests` and `bench` as two commands.
# bench  benchmarks/bench_visible.py: visible vs opaque vs plain torch vs eager, tiny (host us)
#        and large (GPU ms) inputs; JSON, log and the generated code (code.tgz)
# full   tests/kernels whole, on CUDA (as run_gpu.sh tests)
#
# Logs go to $OUT (default benchmarks/gpu/out): environment.txt, one .log per step,
# visible.json, code.tgz, summary.txt. If pytest or hypothesis is missing, both are installed
# into a scratch directory from the wheels in $OPREG_GPU_WHEELS (default build/gpu-wheels).
# Exit status: 0 if every step passed.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root="$PWD"
OUT="${OUT:-$root/benchmarks/gpu/out}"
mkdir -p "$OUT"
py="${PYTHON:-python3}"
wheels="${OPREG_GPU_WHEELS:-$root/build/gpu-wheels}"
export PYTHONPATH="$root/packages/opreg-core/src:$root/packages/opreg-kernels/src:$root/packages/opreg-testing/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
unset TRITON_INTERPRET OPREG_DISABLE_TRITON

{
  date -u
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv || true
  "$py" - <<'PY'
import platform, shutil, sys
import torch
print("python", sys.version.split()[0], platform.machine())
print("torch", torch.__version__, "cuda", torch.version.cuda)
try:
    import triton
    print("triton", triton.__version__)
except Exception as exc:
    print("triton import failed:", exc)
print("gpus", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
print("c++ compiler", shutil.which("g++") or shutil.which("c++"))
from opreg_kernels._private import missing_internals
print("opreg_kernels internals missing here:", missing_internals())
PY
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

if ! "$py" -c "import pytest, hypothesis" 2>/dev/null; then
  site="${TMPDIR:-/tmp}/opreg-gpu-site"
  echo "pytest or hypothesis missing: installing them from $wheels into $site"
  "$py" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$wheels" \
    --target "$site" pytest hypothesis && export PYTHONPATH="$PYTHONPATH:$site"
fi

status=0
: > "$OUT/summary.txt"
step() {  # step NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc ($((SECONDS - start)) s)" | tee -a "$OUT/summary.txt"
  tail -n 30 "$OUT/$name.log"
  [ "$rc" -eq 0 ] || status=1
}

pytest_args=(-p no:cacheprovider -ra --durations=15)
if ! "$py" -c "import importlib.metadata as m, sys; sys.exit(not any(e.value.startswith('opreg_testing') for e in m.entry_points(group='pytest11')))"; then
  pytest_args+=(-p opreg_testing.plugin)
fi
steps=("$@")
[ "${#steps[@]}" -gt 0 ] || steps=(tests bench)
for name in "${steps[@]}"; do
  case "$name" in
    tests) step tests_visible "${VISIBLE_TESTS_TIMEOUT:-480}" "$py" -m pytest \
             tests/kernels/test_compiler_visible.py tests/kernels/test_aot_inductor.py \
             tests/kernels/test_fused_add.py tests/test_private_boundaries.py \
             "${pytest_args[@]}" -v ;;
    bench) mkdir -p "$OUT/code"
           step bench_visible "${VISIBLE_BENCH_TIMEOUT:-150}" "$py" benchmarks/bench_visible.py \
             --json "$OUT/visible.json" --code-dir "$OUT/code"
           (cd "$OUT" && tar czf code.tgz code && rm -rf code) ;;
    full) step tests_cuda 330 "$py" -m pytest tests/kernels "${pytest_args[@]}" -q ;;
    *) echo "unknown step $name (tests, bench, full)"; status=1 ;;
  esac
done

echo "=== summary"
cat "$OUT/summary.txt"
exit "$status"
