#!/bin/sh
# Reproduce experiments/scale/report.md (issue 9) from the repository root:
#   sh experiments/scale/run.sh
# 1. the train20k data cache (the target's own answers with tapped states and top-64 log-probs;
#    resumable, one shard of 500 prompts at a time; SHARDS=2 builds what the trainings read, ~30 min
#    on 2 cores at the measured 172 tok/s; the whole mix is SHARDS=0, ~8 h),
# 2. three trainings with the same data, steps, batch and seed (each resumes from its last
#    checkpoint), 3. evaluation at temperature 1 and 0 (LIMIT prompts per dataset, default 50),
# 4. the report tables and plots. Checkpoints land in experiments/scale/runs/ (git-ignored).
#   EVAL_ONLY=1 sh experiments/scale/run.sh     re-evaluates existing checkpoints
set -e
SHARDS=${SHARDS:-2}
LIMIT=${LIMIT:-50}
make -s
if [ -z "$EVAL_ONLY" ]; then
    build/dspark-bench train --config experiments/scale/dspark-markov.json --data-only --max-shards "$SHARDS"
    for k in dflash dspark-markov dspark-rnn; do
        build/dspark-bench train --config experiments/scale/$k.json
    done
fi
mkdir -p experiments/scale/traces
for t in 1 0; do
    for k in dflash dspark-markov dspark-rnn; do
        build/dspark-bench run --config experiments/scale/eval-$k.json --temperature $t --limit "$LIMIT" \
            --out experiments/scale/traces/$k-t$t.h5
    done
    build/dspark-bench report experiments/scale/traces/dflash-t$t.h5 experiments/scale/traces/dspark-markov-t$t.h5 \
        experiments/scale/traces/dspark-rnn-t$t.h5 --plot experiments/scale/plots-t$t --out experiments/scale/results-t$t.md
done
