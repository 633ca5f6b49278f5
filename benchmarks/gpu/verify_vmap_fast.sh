#!/usr/bin/env bash
# The vmap short paths (issue 14 part 2) on the GPU host, in one command (torch 2.11 and Python
# 3.12 preinstalled, no network):
#
#   bash benchmarks/gpu/verify_vmap_fast.sh [STEP...]   (default: env short dispatcher core
#                                                       others kernels profile curve)
#
# env        the torch internals the short paths read resolve on this torch, and the vmap level's
#            dispatch keys as the probe measures them here
# short      tests/core/test_vmap_short_path.py and test_vmap_direct.py, CUDA tensors included
#            (both paths give identical results and vmap_fn the same dispatch state)
# dispatcher the same with both short paths switched off (OPREG_VMAP_SHORT_PATH=0,
#            OPREG_VMAP_NOGRAD_OP=0): the path every unmet precondition falls back to
# core       tests/core and tests/test_private_boundaries.py
# others     tests/kernels/test_register.py and tests/testing/test_bad_ops_are_caught.py
# kernels    tests/kernels on CUDA (the Triton ops under vmap keep their device kernels)
# profile    benchmarks/probes/profile_vmap.py (each short path alone, host CPU)
# curve      benchmarks/bench_vmap_curve.py --paths --only-opreg (host CPU; JSON in $OUT)
#
# All steps take about 8-10 minutes on the H200 host (kernels and curve the longest); under a
# 10-minute limit per command run them in two calls, e.g. `... env short dispatcher core others`
# then `... kernels profile curve`.
#
# Logs and results go to $OUT (default benchmarks/results/gpu/out/vmap_fast): environment.txt, one .log
# per step, vmap_curve_paths.json, summary.txt. pytest and hypothesis, if missing, are installed
# into a scratch directory from the wheels in $OPREG_GPU_WHEELS (default build/gpu-wheels).
# Exit status: 0 if every step passed.
OUT_DEFAULT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/results/gpu/out/vmap_fast"
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
use_source_tree
record_environment
ensure_test_tools
pytest_args+=(-q)
short_tests=(tests/core/test_vmap_short_path.py tests/core/test_vmap_direct.py)

cat > "$OUT/check_env.py" <<'PY'
import sys
import torch
from opreg_core import _private
import opreg_core._batching as batching

missing = _private.missing_internals()
print("missing internals:", missing or "none")
keys = _private.vmap_level_keys()
if keys is None:
    print("the probe failed: the fold is off on this torch")
    sys.exit(1)
show = torch._C.DispatchKeySet.from_raw_repr
print("a vmap level includes:", show(keys.included))
print("a vmap level excludes:", show(keys.excluded))
print("short paths on:", batching.short_path_enabled, batching.nograd_op_enabled)
if not torch.cuda.is_available():
    print("no CUDA device: the CUDA cases of the tests will be skipped")
    sys.exit(1)
sys.exit(1 if missing else 0)
PY

steps=("$@")
[ "${#steps[@]}" -gt 0 ] || steps=(env short dispatcher core others kernels profile curve)
for name in "${steps[@]}"; do
  case "$name" in
    env) step env 120 "$py" "$OUT/check_env.py" ;;
    short) step tests_short_paths 300 "$py" -m pytest "${short_tests[@]}" "${pytest_args[@]}" ;;
    dispatcher) step tests_dispatcher_path 300 env OPREG_VMAP_SHORT_PATH=0 OPREG_VMAP_NOGRAD_OP=0 \
      "$py" -m pytest "${short_tests[@]}" tests/core/test_vmap.py "${pytest_args[@]}" ;;
    core) step tests_core 400 "$py" -m pytest tests/core tests/test_private_boundaries.py "${pytest_args[@]}" ;;
    others) step tests_others 400 "$py" -m pytest tests/kernels/test_register.py \
      tests/testing/test_bad_ops_are_caught.py "${pytest_args[@]}" ;;
    kernels) step tests_kernels_cuda 400 "$py" -m pytest tests/kernels "${pytest_args[@]}" ;;
    profile) step profile_vmap 300 bash -c "'$py' benchmarks/probes/profile_vmap.py" ;;
    curve) step bench_vmap_curve 500 bash -c \
      "cd benchmarks && '$py' bench_vmap_curve.py --paths --only-opreg --json '$OUT/vmap_curve_paths.json'" ;;
    *) echo "unknown step $name (env short dispatcher core others kernels profile curve)"; status=1 ;;
  esac
done

finish
