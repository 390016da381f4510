#!/bin/bash
# gpu_check.sh — every CUDA check and measurement of the CUDA backend, in one command, on a machine
# with an NVIDIA GPU (issue 26). From the repo root, after `make` (CUDA=1: nvcc found):
#
#   bash scripts/gpu_check.sh [OUTDIR]          # default OUTDIR: out/gpu
#
# 1. build/tests/test_cuda: every op and the whole forward against the CPU backend's exact
#    contract with stated bounds, and SmolLM2's prefill logits and greedy continuations (needs the
#    model: `make model`, or DSPARK_MODEL), then again with every forward run as CUDA graphs; 2. bench-target --backend cuda on SmolLM2 (decode
#    against the HBM floor, the SPS(B) curve to B = 256 as JSON for the schedulers) and on random
#    timing models of 1-4 B parameters made on the GPU; 3. `run` of experiments/quickstart.json on
#    the GPU with that SPS table, AR baseline in the same process; 4. the losslessness gate's
#    production round and SmolLM2 cases on the GPU (suffix drafter).
# Environment: DSB_BUILD (default build) holds dspark-bench and tests/; GPU_CHECK_STAGE=ops runs
# only what needs no model (tests without SmolLM2, synthetic models); GPU_CHECK_STAGE=int8 (issue 56):
# test_cuda (the int8 contract bit for bit the CPU's, its mutant red), decode and SPS(B) of the
# int8 and exact contracts side by side on random models of the real target's shape and others, a
# decode profile, and test_cuda's forwards as CUDA graphs; everything into OUTDIR/gpu-int8.tgz
# (a lent machine returns few files) and a summary on stdout. GPU_CHECK_GATE lists more
# drafters for step 4 (each bounded by GPU_CHECK_GATE_S seconds, default 75).
# A machine that takes few files at a time: scripts/gpu_bundle.sh packs binaries, libraries and
# the model in parts (BENCHMARKS.md, "The CUDA backend", says how it was done on an H100).
set -u
OUT=${1:-out/gpu}
BLD=${DSB_BUILD:-build}
B=$BLD/dspark-bench
STAGE=${GPU_CHECK_STAGE:-all}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/env.txt" 2>&1
lscpu | grep -E "Model name|^CPU\(s\)" >> "$OUT/env.txt"
cat "$OUT/env.txt"
[ "$STAGE" = ops ] || [ "$STAGE" = int8 ] && export DSPARK_SKIP_REAL_MODEL=1
if [ "$STAGE" = int8 ]; then
  W=$OUT/int8 && mkdir -p "$W"
  echo "== test_cuda: both contracts, the int8 one bit for bit against the CPU's"
  timeout 150 "$BLD/tests/test_cuda" > "$W/test_cuda.txt" 2>&1; echo "rc=$?" >> "$W/test_cuda.txt"
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|^\[  ERROR|int8|mutant|differ|not bit|Failure|rc=" "$W/test_cuda.txt" | head -60
  # shape:type:contract:max B:graphs (DSPARK_CUDA_GRAPH):context, each a row of the summary
  # (GPU_CHECK_SYNTH: these rows)
  ROWS=${GPU_CHECK_SYNTH:-"qwen2.5-1.5b:q4_1:int8:256:1:128 qwen2.5-1.5b:q4_1:int8:16:0:128
    qwen2.5-1.5b:q4_1:int8:8:1:1024 qwen2.5-1.5b:q4_1:exact:256:1:128 qwen2.5-1.5b:q4_1:exact:8:1:1024
    qwen2.5-1.5b:q8_0:int8:16:1:128 llama-1b:q4_1:int8:16:1:128 llama-1b:q4_1:exact:16:1:128
    qwen3-4b:q4_1:int8:16:1:128 smollm2-135m:q4_1:int8:16:1:128"}
  for st in $ROWS; do
    IFS=: read -r m ty c mb g ctx <<< "$st"
    X=; [ "$c" = exact ] && X=--exact
    echo "== bench-target synthetic $m $ty, $c contract, graphs $g, context $ctx" | tee -a "$W/synth.txt"
    DSPARK_CUDA_GRAPH=$g timeout 60 "$B" bench-target --backend cuda $X --synthetic $m --synthetic-type $ty \
      --max-B $mb --context $ctx --decode-tokens 64 --reps 3 --out "$W/synth-$m-$ty-$c-$mb-$g-$ctx.json" \
      >> "$W/synth.txt" 2>&1; echo "rc=$?" >> "$W/synth.txt"
  done
  grep -E "^==|^decode \(|^ +(1|8|16|64|128|256) |rc=[1-9]|error" "$W/synth.txt"
  echo "== decode profile, qwen2.5-1.5b q4_1 int8 (DSPARK_CUDA_PROFILE=1)"
  DSPARK_CUDA_PROFILE=1 timeout 35 "$B" bench-target --backend cuda --synthetic qwen2.5-1.5b --max-B 1 --decode-tokens 64 \
    --reps 2 > "$W/profile.txt" 2>&1; echo "rc=$?" >> "$W/profile.txt"
  sed -n '/one-token forwards/,/^  all/p' "$W/profile.txt" | head -16
  for k in $(seq 1 ${GPU_CHECK_REPEAT:-3}); do
    echo "== test_cuda with every forward as CUDA graphs ($k), and without"
    DSPARK_CUDA_GRAPH=1 DSPARK_CUDA_GRAPH_STATS=1 timeout 100 "$BLD/tests/test_cuda" > "$W/test_cuda_graph$k.txt" 2>&1
    echo "rc=$?" >> "$W/test_cuda_graph$k.txt"
    grep -E "^\[  (PASSED|FAILED)|not bit|differ|cuda graphs|rc=" "$W/test_cuda_graph$k.txt" | grep -v mutant | head -20
    timeout 100 "$BLD/tests/test_cuda" > "$W/test_cuda_again$k.txt" 2>&1; echo "rc=$?" >> "$W/test_cuda_again$k.txt"
    grep -E "^\[  (PASSED|FAILED)|not bit|differ|rc=" "$W/test_cuda_again$k.txt" | head -20
  done
  # the production round of the gate on the GPU's int8 contract, draft trees included (the
  # drafters' tree modes: whole trees and greedy's priced nodes, batches of different trees)
  for d in ${GPU_CHECK_GATE_I8:-recycling suffix}; do
    echo "== lossless --backend cuda (int8) --drafter $d --quick --no-real" | tee -a "$W/lossless.txt"
    timeout ${GPU_CHECK_GATE_S:-120} "$B" lossless --backend cuda --drafter $d --quick --no-real >> "$W/lossless.txt" 2>&1
    echo "rc=$?" >> "$W/lossless.txt"
    tail -3 "$W/lossless.txt"
  done
  nvidia-smi > "$W/nvidia-smi.txt" 2>&1; cp "$OUT/env.txt" "$W/"
  tar -C "$OUT" -czf "$OUT/gpu-int8.tgz" int8 && rm -rf "$W"
  exit 0
fi
echo "== test_cuda"
timeout 300 "$BLD/tests/test_cuda" > "$OUT/test_cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/test_cuda.txt"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|SmolLM2|greedy|FAIL|rc=" "$OUT/test_cuda.txt"
echo "== test_cuda, every forward recorded and run as CUDA graphs (DSPARK_CUDA_GRAPH=1)"
DSPARK_CUDA_GRAPH=1 DSPARK_CUDA_GRAPH_STATS=1 timeout 300 "$BLD/tests/test_cuda" > "$OUT/test_cuda_graph.txt" 2>&1
echo "rc=$?" >> "$OUT/test_cuda_graph.txt"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|greedy|graphs:|cuda graphs|FAIL|rc=" "$OUT/test_cuda_graph.txt"
if [ "$STAGE" = ops ]; then
  for s in llama-1b qwen3-4b; do
    echo "== bench-target synthetic $s q4_1" | tee -a "$OUT/synth.txt"
    timeout 120 "$B" bench-target --backend cuda --synthetic $s --max-B 256 --decode-tokens 64 --reps 3 \
      --out "$OUT/synth-$s.json" >> "$OUT/synth.txt" 2>&1; echo "rc=$?" >> "$OUT/synth.txt"
  done
  for st in "llama-1b q8_0" "llama-1b bf16" "llama-3b q4_1" "smollm2-135m q4_1"; do
    set -- $st
    echo "== bench-target synthetic $1 $2" | tee -a "$OUT/synth.txt"
    timeout 90 "$B" bench-target --backend cuda --synthetic $1 --synthetic-type $2 --max-B 16 --decode-tokens 64 \
      --reps 3 >> "$OUT/synth.txt" 2>&1; echo "rc=$?" >> "$OUT/synth.txt"
  done
  grep -E "^==|^decode|^prefill|bandwidth|rc=|error" "$OUT/synth.txt"
  exit 0
fi
echo "== bench-target SmolLM2 on cuda"
timeout 120 "$B" bench-target --backend cuda --max-B 256 --out "$OUT/bench-cuda-smollm2.json" > "$OUT/bench-cuda-smollm2.txt" 2>&1
echo "rc=$?" >> "$OUT/bench-cuda-smollm2.txt"
cat "$OUT/bench-cuda-smollm2.txt"
echo "== run experiments/quickstart.json on cuda"
timeout 150 "$B" run --config experiments/quickstart.json --backend cuda --sps "$OUT/bench-cuda-smollm2.json" \
  --out "$OUT/run-cuda.h5" > "$OUT/run-cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/run-cuda.txt"
tail -4 "$OUT/run-cuda.txt"
timeout 30 "$B" report "$OUT/run-cuda.h5" --out "$OUT/report-cuda.md" > /dev/null 2>&1 && sed -n '5,14p' "$OUT/report-cuda.md"
for d in suffix ${GPU_CHECK_GATE:-}; do
  echo "== lossless on cuda, drafter $d" | tee -a "$OUT/lossless-cuda.txt"
  timeout ${GPU_CHECK_GATE_S:-75} "$B" lossless --backend cuda --exact --drafter $d >> "$OUT/lossless-cuda.txt" 2>&1
  echo "rc=$?" >> "$OUT/lossless-cuda.txt"
  tail -2 "$OUT/lossless-cuda.txt"
done
