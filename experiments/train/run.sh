#!/bin/sh
# Reproduce experiments/train/report.md (issue 4) from the repository root:
#   sh experiments/train/run.sh
# 1. the data cache (target responses to the training mix, tapped states; ~40 min on 2 cores,
#    shared by the three drafters and resumed if interrupted), 2. three training runs with the same
#    data, steps, batch and seed (each resumes from its last checkpoint if killed), 3. evaluation of
#    each trained drafter at temperature 1 on held-out prompts, 4. the report.
# Trained checkpoints land in experiments/train/runs/ (git-ignored). To only re-evaluate existing
# checkpoints: EVAL_ONLY=1 sh experiments/train/run.sh
set -e
# This sandbox pins OPENBLAS_CORETYPE=Haswell (AVX2). OpenBLAS's own detection picks its AVX-512
# kernels here, which trained the same losses ~25% faster (4.0 vs 5.1 s per DSpark step).
unset OPENBLAS_CORETYPE
make -s
if [ -z "$EVAL_ONLY" ]; then
    for k in dflash dspark-markov dspark-rnn; do
        build/dspark-bench train --config experiments/train/$k.json
    done
fi
for k in dflash dspark-markov dspark-rnn; do
    build/dspark-bench run --config experiments/train/eval-$k.json
done
build/dspark-bench report experiments/train/traces/dflash-t1.h5 experiments/train/traces/dspark-markov-t1.h5 \
    experiments/train/traces/dspark-rnn-t1.h5 --plot experiments/train/plots --out experiments/train/results.md
