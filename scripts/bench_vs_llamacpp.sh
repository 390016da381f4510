#!/usr/bin/env bash
# bench_vs_llamacpp.sh — the target runtime beside llama.cpp on the same GGUF and threads, in one
# run, alternating (bench-target int8, bench-target --exact, llama-bench), ROUNDS times, so the
# machine's drift hits all three alike. Prints a markdown table of the medians' ranges.
#   LLAMA_BENCH=/path/to/llama-bench scripts/bench_vs_llamacpp.sh [ROUNDS] [OUTDIR]
# llama-bench is not built by this project: BENCHMARKS.md gives the commands (llama.cpp as vendored
# in the PyPI sdist of llama-cpp-python). THREADS (default 2) and DSPARK_MODEL are honoured.
set -euo pipefail
BIN=${BIN:-build/dspark-bench}
LB=${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}
MODEL=${DSPARK_MODEL:-$HOME/.cache/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf}
ROUNDS=${1:-3}
OUT=${2:-build/bench-vs-llamacpp}
T=${THREADS:-2}
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS: bench-target (int8)" >&2
  "$BIN" bench-target --model "$MODEL" --threads "$T" --max-B 16 --out "$OUT/int8-$r.json" > "$OUT/int8-$r.txt"
  echo "round $r/$ROUNDS: bench-target --exact" >&2
  "$BIN" bench-target --model "$MODEL" --threads "$T" --max-B 16 --exact --out "$OUT/exact-$r.json" > "$OUT/exact-$r.txt"
  echo "round $r/$ROUNDS: llama-bench" >&2
  "$LB" -m "$MODEL" -t "$T" -p 1,2,4,8,16 -n 0 -d 128 -r 5 -o json > "$OUT/llama-pp-$r.json"
  "$LB" -m "$MODEL" -t "$T" -p 0 -n 128 -d 128 -r 5 -o json > "$OUT/llama-tg-$r.json"
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rng(v, fmt="%.1f"):
    return (fmt % min(v)) + "–" + (fmt % max(v)) if len(v) > 1 else fmt % v[0]
ours = {k: [json.load(open(f"{out}/{k}-{r}.json")) for r in range(1, rounds + 1)] for k in ("int8", "exact")}
lpp = [json.load(open(f"{out}/llama-pp-{r}.json")) for r in range(1, rounds + 1)]
ltg = [json.load(open(f"{out}/llama-tg-{r}.json")) for r in range(1, rounds + 1)]
j0 = ours["int8"][0]
print(f"CPU: {j0['cpu']}, {j0['threads']} threads; kernels {j0.get('kernels', '?')} / "
      f"{ours['exact'][0].get('kernels', '?')}; llama.cpp {lpp[0][0].get('build_commit', '?')}")
floor = [1e3 / j["decode_floor_ms"] for j in ours["int8"]]
print(f"bandwidth floor (decode, context 128): {rng(floor, '%.0f')} tok/s\n")
print("| | dspark-bench int8 | dspark-bench exact | llama.cpp |\n|---|---:|---:|---:|")
dec = {k: [j["decode_tok_s"] for j in v] for k, v in ours.items()}
ltgv = [x["avg_ts"] for run in ltg for x in run if x["n_gen"] > 0]
print(f"| decode tok/s (context 128) | {rng(dec['int8'])} | {rng(dec['exact'])} | {rng(ltgv)} |")
def cost(j, B):
    return j["sps"]["seconds"][j["sps"]["B"].index(B)]
def lcost(run, B):
    for x in run:
        if x["n_prompt"] == B and x["n_gen"] == 0:
            return B / x["avg_ts"]
for B in (1, 2, 4, 8, 16):
    a = [1e3 * cost(j, B) for j in ours["int8"]]
    b = [1e3 * cost(j, B) for j in ours["exact"]]
    c = [1e3 * lcost(run, B) for run in lpp]
    print(f"| forward of B={B} after 128, ms | {rng(a, '%.2f')} | {rng(b, '%.2f')} | {rng(c, '%.2f')} |")
for B in (4, 8):
    a = [cost(j, B) / cost(j, 1) for j in ours["int8"]]
    b = [cost(j, B) / cost(j, 1) for j in ours["exact"]]
    c = [lcost(run, B) / lcost(run, 1) for run in lpp]
    print(f"| cost({B}) / cost(1) | {rng(a, '%.2f')} | {rng(b, '%.2f')} | {rng(c, '%.2f')} |")
PY
