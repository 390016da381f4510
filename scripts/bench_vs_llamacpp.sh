#!/usr/bin/env bash
# bench_vs_llamacpp.sh — the target runtime beside llama.cpp on the same machine and threads, in one
# run, alternating ROUNDS times (bench-target int8, optionally --exact, llama-bench on the same file
# and on a second model, its strongest CPU path), so the machine's drift hits all alike. Prints a
# markdown table of the medians' ranges, each figure also as a fraction of this machine's int8 roof
# (bench-target's, for the instruction mix of our kernel path).
#   [LLAMA_BENCH=/path/to/llama-bench] [LLAMA_STRONG=/path/to/q4_0.gguf | none] [EXACT=1] \
#     scripts/bench_vs_llamacpp.sh [ROUNDS] [OUTDIR]
# Without LLAMA_BENCH, llama.cpp's tools are built by scripts/build_llamacpp.sh (outside the
# repository, 4-10 minutes the first time, reused after) and its strongest CPU path for this model is
# a Q4_0 copy of the model made by its own llama-quantize (--allow-requantize), kept beside the
# build; LLAMA_STRONG=none leaves that column out. So on a new machine type (Zen 1, say) the whole
# table is one command: scripts/bench_vs_llamacpp.sh 3 (three rounds took 3-7 minutes on a 2-core
# Zen 3, plus the build the first time). THREADS
# (default 2) and DSPARK_MODEL (a file, or a model name: DSPARK_MODEL=qwen2.5-coder-1.5b LLAMA_STRONG=none,
# two rounds in 8 minutes on a 2-core Zen 4) are honoured, and ISA picks our kernel path (default
# auto): the AVX2 side-by-side on any x86 machine is ISA=avx2 with LLAMA_BENCH from the AVX2-only
# build (scripts/build_llamacpp.sh, its header).
set -euo pipefail
BIN=${BIN:-build/dspark-bench}
MODEL=${DSPARK_MODEL:-$HOME/.cache/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf}
case "$MODEL" in */*) ;; *) # a model name: its file in the cache (scripts/fetch_model.py's table)
  F=$(python3 "$(dirname "$0")/fetch_model.py" --list | awk -v n="$MODEL" '$1 == n { print $2 }')
  [ -n "$F" ] || { echo "bench_vs_llamacpp: unknown model name '$MODEL'" >&2; exit 1; }
  MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/dspark-bench/$F ;;
esac
[ -x "$BIN" ] || { echo "bench_vs_llamacpp: $BIN: not built (make)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "bench_vs_llamacpp: $MODEL: no such model (make model)" >&2; exit 1; }
if [ -z "${LLAMA_BENCH:-}" ]; then
  LBIN=$(sh "$(dirname "$0")/build_llamacpp.sh" llama-bench llama-quantize | tail -n 1)
  LLAMA_BENCH=$LBIN/llama-bench
  if [ -z "${LLAMA_STRONG:-}" ]; then
    LLAMA_STRONG=${LLAMACPP_DIR:-$HOME/.cache/dspark-bench/llamacpp}/$(basename "$MODEL" .gguf)-llamacpp-q4_0.gguf
    if [ ! -f "$LLAMA_STRONG" ]; then
      echo "bench_vs_llamacpp: making llama.cpp's Q4_0 copy $LLAMA_STRONG" >&2
      "$LBIN/llama-quantize" --allow-requantize "$MODEL" "$LLAMA_STRONG.part" Q4_0 > "$LLAMA_STRONG.log" 2>&1 ||
        { echo "bench_vs_llamacpp: llama-quantize failed, see $LLAMA_STRONG.log" >&2; exit 1; }
      mv "$LLAMA_STRONG.part" "$LLAMA_STRONG"
    fi
  fi
fi
LB=$LLAMA_BENCH
[ -x "$LB" ] || { echo "bench_vs_llamacpp: $LB: not an executable llama-bench" >&2; exit 1; }
STRONG=${LLAMA_STRONG:-}
[ "$STRONG" = none ] && STRONG=
[ -z "$STRONG" ] || [ -f "$STRONG" ] || { echo "bench_vs_llamacpp: $STRONG: no such model" >&2; exit 1; }
ROUNDS=${1:-3}
OUT=${2:-build/bench-vs-llamacpp}
T=${THREADS:-2}
ISA=${ISA:-auto}
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.txt
llama() { # $1 tag, $2 model
  "$LB" -m "$2" -t "$T" -p 1,2,4,8,16 -n 0 -d 128 -r 11 -o json > "$OUT/$1-pp-$r.json"
  "$LB" -m "$2" -t "$T" -p 128,512 -n 0 -r 3 -o json > "$OUT/$1-pf-$r.json"
  "$LB" -m "$2" -t "$T" -p 0 -n 128 -d 128 -r 5 -o json > "$OUT/$1-tg-$r.json"
}
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS: bench-target (int8)" >&2
  "$BIN" bench-target --model "$MODEL" --threads "$T" --isa "$ISA" --max-B 16 --reps 11 --out "$OUT/int8-$r.json" > "$OUT/int8-$r.txt"
  if [ "${EXACT:-0}" = 1 ]; then
    echo "round $r/$ROUNDS: bench-target --exact" >&2
    "$BIN" bench-target --model "$MODEL" --threads "$T" --isa "$ISA" --max-B 16 --reps 11 --exact --out "$OUT/exact-$r.json" > "$OUT/exact-$r.txt"
  fi
  echo "round $r/$ROUNDS: llama-bench (same file)" >&2
  llama q41 "$MODEL"
  if [ -n "$STRONG" ]; then
    echo "round $r/$ROUNDS: llama-bench ($STRONG)" >&2
    llama strong "$STRONG"
  fi
done
python3 - "$OUT" "$ROUNDS" "$STRONG" <<'PY'
import json, os, sys
out, rounds, strong = sys.argv[1], int(sys.argv[2]), sys.argv[3]
R = range(1, rounds + 1)
def rng(v, fmt="%.1f"):
    return (fmt % min(v)) + "–" + (fmt % max(v)) if len(v) > 1 else fmt % v[0]
ours = {k: [json.load(open(f"{out}/{k}-{r}.json")) for r in R] for k in ("int8", "exact") if os.path.exists(f"{out}/{k}-1.json")}
peers = {k: {p: [json.load(open(f"{out}/{k}-{p}-{r}.json")) for r in R] for p in ("pp", "pf", "tg")}
         for k in ("q41", "strong") if os.path.exists(f"{out}/{k}-pp-1.json")}
j0 = ours["int8"][0]
macs = j0["matmul_macs_per_token"]
roof = [j["roof"]["int8_GMACps"] for j in ours["int8"]]
print(f"CPU: {j0['cpu']}, {j0['threads']} threads ({j0['roof']['logical_cpus']} logical CPUs on "
      f"{j0['roof']['physical_cores']} cores); kernels {j0.get('kernels', '?')}; llama.cpp "
      f"{peers['q41']['pp'][0][0].get('build_commit', '?')}" + (f", strongest path: {os.path.basename(strong)}" if strong else ""))
print(f"int8 roof ({j0['roof']['instruction']}, registers only): {rng(roof, '%.0f')} G MAC/s on {j0['threads']} threads; "
      f"bandwidth {rng([j['bandwidth_GBps'] for j in ours['int8']])} GB/s; {macs / 1e6:.1f} M MAC per token\n")
cols = [("dspark-bench int8", "int8")] + ([("dspark-bench exact", "exact")] if "exact" in ours else []) + \
       [("llama.cpp, same file", "q41")] + ([("llama.cpp " + os.path.basename(strong), "strong")] if "strong" in peers else [])
print("| | " + " | ".join(c[0] for c in cols) + " |\n|---|" + "---:|" * len(cols))
def frac(tok_s):  # tokens/s -> % of the roof, median roof
    return 100 * tok_s * macs / 1e9 / sorted(roof)[len(roof) // 2]
def peer(k, p, np_, ng):
    return [x["avg_ts"] for run in peers[k][p] for x in run if x["n_prompt"] == np_ and x["n_gen"] == ng]
def cell(v, fmt, tok_s):
    return f"{rng(v, fmt)} ({rng([frac(x) for x in tok_s], '%.0f')} %)"
row = []
for name, k in cols:
    if k in ours: v = [j["decode_tok_s"] for j in ours[k]]
    else: v = peer(k, "tg", 0, 128)
    row.append(cell(v, "%.0f", v))
print("| decode tok/s, context 128 (% of roof) | " + " | ".join(row) + " |")
for n in (128, 512):
    row = []
    for name, k in cols:
        v = [j["prefill_tok_s"][str(n)] for j in ours[k]] if k in ours else peer(k, "pf", n, 0)
        row.append(cell(v, "%.0f", v))
    print(f"| prefill {n} tok/s (% of roof) | " + " | ".join(row) + " |")
def ours_ms(j, B): return 1e3 * j["sps"]["seconds"][j["sps"]["B"].index(B)]
for B in (1, 2, 4, 8, 16):
    row = []
    for name, k in cols:
        ms = [ours_ms(j, B) for j in ours[k]] if k in ours else [1e3 * B / x for x in peer(k, "pp", B, 0)]
        row.append(cell(ms, "%.2f", [1e3 * B / m for m in ms]))
    print(f"| forward of B={B} after 128, ms (% of roof) | " + " | ".join(row) + " |")
for B in (4, 8, 16):
    row = []
    for name, k in cols:
        if k in ours: v = [ours_ms(j, B) / ours_ms(j, 1) for j in ours[k]]
        else: v = [(B / b) / (1 / a) for a, b in zip(peer(k, "pp", 1, 0), peer(k, "pp", B, 0))]
        row.append(rng(v, "%.2f"))
    print(f"| cost({B}) / cost(1) | " + " | ".join(row) + " |")
# Paired by round: a round's figures were taken minutes apart, so their ratio drifts far less than
# either program's range over the rounds (a noisy guest moves both alike)
prs = [(n, k) for n, k in cols if k not in ours]
print("\nPaired, round by round: the peer's time over dspark-bench int8's (> 1: ours faster)\n")
print("| | " + " | ".join(n for n, _ in prs) + " |\n|---|" + "---:|" * len(prs))
def paired(label, o, p):  # o, p: per-round throughputs (ours, the peer's)
    print(f"| {label} | " + " | ".join(" / ".join("%.2f" % (a / b) for a, b in zip(o, p[k])) for _, k in prs) + " |")
paired("decode, context 128", [j["decode_tok_s"] for j in ours["int8"]], {k: peer(k, "tg", 0, 128) for _, k in prs})
for n in (128, 512):
    paired(f"prefill {n}", [j["prefill_tok_s"][str(n)] for j in ours["int8"]], {k: peer(k, "pf", n, 0) for _, k in prs})
for B in (1, 2, 4, 8, 16):
    paired(f"forward of B={B} after 128", [1e3 * B / ours_ms(j, B) for j in ours["int8"]], {k: peer(k, "pp", B, 0) for _, k in prs})
PY
