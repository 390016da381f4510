#!/bin/sh
# Issue 9, the longer budget (experiments/scale/report.md, section 5b), from the repository root:
#   sh experiments/scale/long/run.sh
# Needs shards 0-1 of the train20k cache (sh experiments/scale/run.sh builds them, ~30 min).
# 1. DFlash and DSpark-Markov, 600 steps each (5x the 120-step runs), one thread each, side by
#    side (~100 min on 2 cores; each resumes from its last checkpoint when stopped);
# 2. both served at T = 1, gamma 7, fixed scheduler, LIMIT prompts per dataset (default 20) of
#    GSM8K, HumanEval, MT-Bench (both turns), no baseline (its speed is in the 120-step table);
# 3. the comparison table and plots.
#   EVAL_ONLY=1 sh experiments/scale/long/run.sh    re-evaluates the existing checkpoints
set -e
LIMIT=${LIMIT:-20}
D=experiments/scale/long
make -s
if [ -z "$EVAL_ONLY" ]; then
    build/dspark-bench train --config $D/dflash.json --threads 1 &
    a=$!
    build/dspark-bench train --config $D/dspark-markov.json --threads 1 &
    b=$!
    wait $a
    wait $b
fi
mkdir -p $D/traces
for k in dflash dspark-markov; do
    build/dspark-bench run --config $D/eval-$k.json --temperature 1 --limit "$LIMIT" --no-baseline \
        --out $D/traces/$k-t1.h5
done
build/dspark-bench report $D/traces/dflash-t1.h5 $D/traces/dspark-markov-t1.h5 --plot $D/plots-t1 --out $D/results-t1.md
