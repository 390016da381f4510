#!/bin/sh
# Issue 13's figures on this machine, each one command (run from the repository root):
#   Fig. 5  threshold sweep per domain, replayed on the fixed-scheduler trace of the trained DSpark-Markov
#   Fig. 6  STS calibration of that drafter (ECE objective, the paper's), written into its checkpoint
#   Fig. 7/8 closed-loop serving at concurrency 1, 4, 16: baseline + six schedulers (~17 min quiet)
#   App. A  the exact first-token law of Algorithm 1 with and without its early stop (the gate)
#   SERVE_MORE=1 also: Fig. 7/8 again and the open loop (Poisson arrivals at 0.5-4 req/s), each with the
#   SPS table measured here first (bench-target, ~15 s): the configs name the AVX-512 machine's table,
#   the one they were reported with, and --sps replaces it with this machine's
# Needs experiments/scale's trained DSpark-Markov and its T = 1 trace (sh experiments/scale/run.sh).
# Nothing else may run on the machine during the serving sweep: it measures wall time.
set -e
B=build/dspark-bench
T=experiments/scale/traces/dspark-markov-t1.h5
O=experiments/verify
[ -x $B ] || make
[ -f $T ] || { echo "run.sh: $T missing: run sh experiments/scale/run.sh first" >&2; exit 1; }
$B report $T --threshold-sweep --out $O/fig5-threshold-sweep.md
$B calibrate $T --objective ece > $O/fig6-calibration.md
$B serve --config $O/fig78-serving.json --out $O/serving
if [ -n "$SERVE_MORE" ]; then
    mkdir -p out
    $B bench-target --out out/sps-this-machine.json
    $B serve --config $O/fig78-serving-avx512.json --sps out/sps-this-machine.json --out $O/serving-avx512
    $B serve --config $O/fig78-open.json --sps out/sps-this-machine.json --out $O/serving-open
fi
$B lossless --quick --no-real 2>/dev/null | grep -i -E "appendix|retrospective|async-topk-now" > $O/appendix-a.md || true
