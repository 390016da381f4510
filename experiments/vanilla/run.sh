#!/bin/sh
# Reproduce experiments/vanilla/results.md (discussed in report.md) (issue 3): four runs of about six minutes each on a
# 2-core CPU, then one report. Run from the repository root: sh experiments/vanilla/run.sh
set -e
for c in k4_t0 k4_t1 k27_t0 k27_t1; do
    build/dspark-bench run --config experiments/vanilla/$c.json
done
build/dspark-bench report experiments/vanilla/traces/k4_t0.h5 experiments/vanilla/traces/k4_t1.h5 \
    experiments/vanilla/traces/k27_t0.h5 experiments/vanilla/traces/k27_t1.h5 \
    --plot experiments/vanilla/plots --out experiments/vanilla/results.md
