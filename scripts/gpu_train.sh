#!/bin/bash
# gpu_train.sh — issue 26's fourth deliverable on a GPU machine: what a larger training budget buys.
# The data cache is generated with the target on the GPU (`train --backend cuda`: the forwards on the
# device; sampling and top-K on all the host's cores), MTP (the leader of experiments/learned-heads
# at the CPU smoke budget of 600 sequences) is trained on all the host's cores, and tau is measured
# with the target on the GPU, fixed gamma 4, on held-out prompts of GSM8K, HumanEval and MT-Bench
# (none in the training mix), with the autoregressive baseline in the same process.
#
#   bash scripts/gpu_train.sh [OUTDIR]          # default OUTDIR: out/gpu-train
#
# Budgets (environment): GT_PROMPTS training prompts (default 1000), GT_STEPS steps of 16 sequences
# (200), GT_EVAL prompts per evaluation set (10); GT_S_DATA, GT_S_TRAIN, GT_S_EVAL the seconds each
# stage may take (150, 180, 150). A stage cut short keeps what it wrote: run it again and the cache
# and the training resume where they stopped (training from its last checkpoint, every 25 steps).
# DSB_BUILD (default build) holds dspark-bench; DSPARK_DATA / DSPARK_MODEL as for every command
# (scripts/gpu_bundle.sh's env.sh sets them). BACKEND=cpu runs the same here, to check the script
# with tiny budgets: GT_PROMPTS=8 GT_STEPS=4 GT_EVAL=1 BACKEND=cpu bash scripts/gpu_train.sh /tmp/gt
set -u
O=${1:-out/gpu-train}
BLD=${DSB_BUILD:-build}
B=$BLD/dspark-bench
BE=${BACKEND:-cuda}
P=${GT_PROMPTS:-1000}
S=${GT_STEPS:-200}
E=${GT_EVAL:-10}
mkdir -p "$O"
cat > "$O/train-mtp.json" <<EOF
{
  "comment": "scripts/gpu_train.sh: MTP depth 4 over a 4096-token draft vocabulary; $P training-mix prompts answered by the target at T = 0.2, $S steps of 16 sequences x 32 anchors",
  "drafter": {"name": "mtp", "depth": 4, "draft_vocab": 4096},
  "data": {"dataset": "trainmix", "limit": $P, "temperature": 0.2, "top_p": 0.9, "max_new_tokens": 256, "seed": 1,
           "batch": 64, "cache": "$O/cache"},
  "train": {"steps": $S, "seqs_per_step": 16, "anchors": 32, "lr": 6e-4, "warmup_frac": 0.04,
            "eval_every": 50, "ckpt_every": 25, "holdout": 0.05, "eval_seqs": 20, "seed": 1},
  "out": "$O/run"
}
EOF
cat > "$O/eval-mtp.json" <<EOF
{
  "comment": "scripts/gpu_train.sh: the trained MTP, gamma 4, fixed scheduler, $E held-out prompts each of GSM8K, HumanEval and MT-Bench",
  "drafter": {"name": "mtp", "checkpoint": "$O/run/last"},
  "scheduler": "fixed",
  "gamma": 4,
  "datasets": ["gsm8k", "humaneval", "mtbench"],
  "limit": $E,
  "temperature": 0.0,
  "seed": 1,
  "max_new_tokens": 128,
  "baseline": true,
  "out": "$O/eval-mtp-t0.h5"
}
EOF
t0=$(date +%s)
echo "== data cache: $P prompts, target on $BE ($(nproc) host threads)"
timeout "${GT_S_DATA:-150}" "$B" train --config "$O/train-mtp.json" --backend "$BE" --data-only > "$O/data.txt" 2>&1
echo "rc=$?" >> "$O/data.txt"
grep -E "^data:|error|rc=" "$O/data.txt" | tail -3
echo "t=$(( $(date +%s) - t0 ))s"
echo "== train: $S steps on $(nproc) threads"
timeout "${GT_S_TRAIN:-180}" "$B" train --config "$O/train-mtp.json" --backend "$BE" > "$O/train.txt" 2>&1
echo "rc=$?" >> "$O/train.txt"
tr '\r' '\n' < "$O/train.txt" | grep -E "^train: (mtp|step)|eval|error|rc=|trained" | tail -4
echo "t=$(( $(date +%s) - t0 ))s"
[ -f "$O/run/last/config.json" ] || { echo "gpu_train: no checkpoint in $O/run/last"; exit 1; }
echo "== tau on $BE: $E prompts each of gsm8k, humaneval, mtbench, T = 0, with the AR baseline"
rm -f "$O/eval-mtp-t0.h5"
timeout "${GT_S_EVAL:-150}" "$B" run --config "$O/eval-mtp.json" --backend "$BE" > "$O/eval.txt" 2>&1
echo "rc=$?" >> "$O/eval.txt"
tail -5 "$O/eval.txt"
[ -f "$O/eval-mtp-t0.h5" ] && "$B" report "$O/eval-mtp-t0.h5" --out "$O/report.md" > /dev/null 2>&1 &&
  sed -n '5,16p' "$O/report.md"
echo "t=$(( $(date +%s) - t0 ))s"
