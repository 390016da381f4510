#!/bin/sh
# Issue 30's smoke comparison of the learned families that read the target's states, from the
# repository root:  sh experiments/learned-heads/run.sh
# 1. one data cache for all three (400 training-mix prompts answered by SmolLM2 at T = 0.2, taps
#    1,7,14,20,27 for DSpark-Markov and 29 for Medusa and MTP; ~5 min on 2 cores), 2. Medusa, MTP and
#    DSpark-Markov trained on it for the same 150 steps x 4 sequences x 32 anchors x 4 positions
#    (~25 min together), 3. tau at temperature 0 and 1 on 20 held-out prompts each of GSM8K,
#    HumanEval and MT-Bench (~20 min), 4. the tables (results.md). About 50 min in all; every stage
#    resumes (training from its last checkpoint, evaluation skips traces that exist). A smoke
#    comparison at a small budget, not the paper's Table 1. Then Medusa and MTP again with draft
#    vocabularies of 16384 and 4096 tokens (~8 min training, ~20 min evaluation): the draft cost
#    (results-vocab.md). SERVE=1 then calibrates Medusa and MTP on their T = 1 traces and serves MTP
#    closed-loop (~3 min).
set -e
make -s
E=experiments/learned-heads
for k in medusa mtp dspark-markov medusa-v16k mtp-v16k medusa-v4k mtp-v4k; do
    build/dspark-bench train --config $E/train-$k.json
done
mkdir -p $E/traces
for k in medusa mtp dspark-markov medusa-v16k mtp-v16k medusa-v4k mtp-v4k; do
    for T in 0 1; do
        [ -f $E/traces/$k-t$T.h5 ] && continue
        build/dspark-bench run --config $E/eval-$k.json --temperature $T --out $E/traces/$k-t$T.h5
    done
done
build/dspark-bench report $E/traces/medusa-t0.h5 $E/traces/mtp-t0.h5 $E/traces/dspark-markov-t0.h5 \
    $E/traces/medusa-t1.h5 $E/traces/mtp-t1.h5 $E/traces/dspark-markov-t1.h5 --out $E/results.md
# the draft cost with a 16384-token draft vocabulary (and MTP's block in Q8_0)
build/dspark-bench report $E/traces/medusa-v16k-t0.h5 $E/traces/mtp-v16k-t0.h5 \
    $E/traces/medusa-v16k-t1.h5 $E/traces/mtp-v16k-t1.h5 $E/traces/medusa-v4k-t0.h5 $E/traces/mtp-v4k-t0.h5 \
    $E/traces/medusa-v4k-t1.h5 $E/traces/mtp-v4k-t1.h5 --out $E/results-vocab.md
if [ -n "$SERVE" ]; then
    build/dspark-bench calibrate $E/traces/medusa-t1.h5
    build/dspark-bench calibrate $E/traces/mtp-t1.h5
    build/dspark-bench serve --config $E/serve-mtp.json --out $E/serving
fi
