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
# Logs go to $OUT (default benchmarks/results/gpu/out): environment.txt, one .log per step,
# visible.json, code.tgz, summary.txt. If pytest or hypothesis is missing, both are installed
# into a scratch directory from the wheels in $OPREG_GPU_WHEELS (default build/gpu-wheels).
# Exit status: 0 if every step passed.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
use_source_tree
record_environment "from opreg_kernels._private import missing_internals
print('opreg_kernels internals missing here:', missing_internals())"
ensure_test_tools
pytest_args+=(--durations=15)
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

finish
