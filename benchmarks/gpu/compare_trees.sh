#!/usr/bin/env bash
# A change's effect on the host-side figures, against a baseline checkout, in one run on one
# machine (the GPU host's CPU is quieter than a CI VM):
#
#   bash benchmarks/gpu/compare_trees.sh BASE_DIR      (BASE_DIR: a copy of the baseline tree,
#                                                       e.g. `git archive BASE | tar -x -C DIR`)
#
# bench_core (per-call overhead and vmap, CPU) alternately on the baseline and on this tree,
# $ROUNDS times each (default 2); probes/vmap_ab.py (both opreg_core versions interleaved in
# one process, $VMAP_AB_ROUNDS rounds, default 15); bench_import_wall.py (both versions in
# alternating fresh interpreters, $IMPORT_RUNS rounds, default 15). Results in $OUT:
# bench_core_{base,this}_{1,2}.json and one .log per step.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
base="$(cd "${1:?usage: compare_trees.sh BASE_DIR}" && pwd)"
src() { echo "$1/packages/opreg-core/src:$1/packages/opreg-kernels/src:$1/packages/opreg-testing/src"; }
record_environment
for round in $(seq "${ROUNDS:-2}"); do
  for side in base this; do
    tree=$root
    [ "$side" = base ] && tree=$base
    step "bench_core_${side}_$round" 300 env PYTHONPATH="$(src "$tree")" \
      "$py" benchmarks/bench_core.py --rounds 21 --number 1000 \
      --json "$OUT/bench_core_${side}_$round.json"
  done
done
step vmap_ab 300 env PYTHONPATH="$(src "$root")" \
  "$py" benchmarks/probes/vmap_ab.py "$base/packages/opreg-core/src/opreg_core" \
  --rounds "${VMAP_AB_ROUNDS:-15}"
step import_wall 300 env PYTHONPATH="$(src "$root")" \
  "$py" benchmarks/bench_import_wall.py --runs "${IMPORT_RUNS:-15}" \
  --cases opreg_kernels,opreg_core \
  --variant "base=$(src "$base")"
finish
