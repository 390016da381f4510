#!/bin/sh
# Issue 10: what cheap verification buys. From the repository root: sh experiments/verify-cpu/run.sh
# 1. this machine's SPS(B) table (make bench -> bench/bench-target.json, the greedy scheduler's input),
# 2. issue 3's vanilla rows on the int8 contract (each ~8 minutes on 2 cores; baseline and
#    speculative in the same process), 3. the report. (The greedy scheduler needs a drafter with
#    confidences, i.e. a trained DSpark checkpoint: see report.md.)
set -e
make -s bench
for c in k4_t0 k4_t1 k27_t0 k27_t1; do
    build/dspark-bench run --config experiments/verify-cpu/$c.json
done
build/dspark-bench report experiments/verify-cpu/traces/k4_t0.h5 experiments/verify-cpu/traces/k4_t1.h5 \
    experiments/verify-cpu/traces/k27_t0.h5 experiments/verify-cpu/traces/k27_t1.h5 --plot experiments/verify-cpu/plots --out experiments/verify-cpu/results.md
