#!/bin/sh
# Issue 30's smoke comparison of the learned families that read the target's states, and issue 31's
# EAGLE-3 beside them, from the repository root:  sh experiments/learned-heads/run.sh
# 1. one data cache for all (400 training-mix prompts answered by SmolLM2 at T = 0.2, taps
#    1,7,14,20,27 for DSpark-Markov, 1,14,27 for EAGLE-3 and 29 for Medusa and MTP; ~5 min on 2
#    cores), 2. Medusa, MTP and DSpark-Markov trained on it for the same 150 steps x 4 sequences x 32
#    anchors x 4 positions (~25 min together), 3. tau at temperature 0 and 1 on 20 held-out prompts
#    each of GSM8K, HumanEval and MT-Bench (~20 min), 4. the tables (results.md). About 50 min in all;
#    every stage resumes (training from its last checkpoint, evaluation skips traces that exist). A
#    smoke comparison at a small budget, not the paper's Table 1. Then Medusa and MTP again with draft
#    vocabularies of 16384, 4096 and 2048 tokens, Medusa's blocks also in Q4_1 (~12 min training,
#    ~40 min evaluation): the draft cost (results-vocab.md). Then EAGLE-3 at the same budget with a
#    4096-token vocabulary (~3 min training, ~10 min evaluation; results-eagle3.md), and the distilled
#    small LM (vanilla, 2 layers, same budget; ~3 min training, ~20 min evaluation with the AR baseline,
#    beside the self-draft of the same two layers untrained: results-vanilla.md). SERVE=1 then
#    calibrates Medusa and MTP on their T = 1 traces and serves MTP closed-loop (~3 min).
set -e
make -s
E=experiments/learned-heads
for k in medusa mtp dspark-markov medusa-v16k mtp-v16k medusa-v4k mtp-v4k medusa-v2k mtp-v2k eagle3 vanilla; do
    build/dspark-bench train --config $E/train-$k.json
done
mkdir -p $E/traces
for k in medusa mtp dspark-markov medusa-v16k mtp-v16k medusa-v4k mtp-v4k medusa-v2k mtp-v2k medusa-v4k-q4 eagle3 vanilla \
    vanilla-self2; do
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
    $E/traces/medusa-v4k-t1.h5 $E/traces/mtp-v4k-t1.h5 $E/traces/medusa-v4k-q4-t0.h5 $E/traces/medusa-v4k-q4-t1.h5 \
    $E/traces/medusa-v2k-t0.h5 $E/traces/mtp-v2k-t0.h5 $E/traces/medusa-v2k-t1.h5 $E/traces/mtp-v2k-t1.h5 \
    --out $E/results-vocab.md
# EAGLE-3 beside DSpark-Markov and MTP at the same budget
build/dspark-bench report $E/traces/eagle3-t0.h5 $E/traces/mtp-v4k-t0.h5 $E/traces/dspark-markov-t0.h5 \
    $E/traces/eagle3-t1.h5 $E/traces/mtp-v4k-t1.h5 $E/traces/dspark-markov-t1.h5 --out $E/results-eagle3.md
# the distilled small LM beside EAGLE-3, MTP and DSpark-Markov at the same budget, and beside its own
# untrained start (the self-draft of the target's first two layers) with the AR baseline
build/dspark-bench report $E/traces/vanilla-t0.h5 $E/traces/vanilla-self2-t0.h5 $E/traces/eagle3-t0.h5 \
    $E/traces/mtp-v4k-t0.h5 $E/traces/dspark-markov-t0.h5 $E/traces/vanilla-t1.h5 $E/traces/vanilla-self2-t1.h5 \
    $E/traces/eagle3-t1.h5 $E/traces/mtp-v4k-t1.h5 $E/traces/dspark-markov-t1.h5 --out $E/results-vanilla.md
if [ -n "$SERVE" ]; then
    build/dspark-bench calibrate $E/traces/medusa-t1.h5
    build/dspark-bench calibrate $E/traces/mtp-t1.h5
    build/dspark-bench serve --config $E/serve-mtp.json --out $E/serving
fi
