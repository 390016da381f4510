#!/bin/sh
# Issue 32, step 3: our prompt-lookup decoding (`ngram`) beside llama.cpp's (`llama-lookup`) on the
# same Spec-Bench prompts, the same GGUF, greedy, the same machine and threads, each against its own
# autoregressive run. One command from the repository root, resumable (rm -r out/specbench-lookup to redo):
#
#   sh experiments/specbench/llama-lookup.sh           # LIMIT=5 prompts a category: ~12 min on a 2-core Zen 3
#   LIMIT=10 sh experiments/specbench/llama-lookup.sh  # the Spec-Bench table's prompts, about twice that
#
# plus ~10 minutes the first time to build llama-lookup (scripts/build_llamacpp.sh; LLAMA_LOOKUP=PATH
# uses a built one). Nothing else may run beside it (wall times). Steps:
# 1. ours: `run` with ngram under greedy (gamma 8, the best configuration) and under fixed gamma 8 (what
#    llama-lookup does: verify every drafted token), the autoregressive baseline alternating prompt by
#    prompt in the same process; the rendered prompts (chat template applied) go to prompts.jsonl
# 2. llama.cpp: per prompt, llama-lookup with no drafts (its autoregressive run), its default draft
#    size (3) and 8, alternating, -t/-tb THREADS, --temp 0, -n 128; its "encoded N tokens" must equal
#    our prompt's token count (checked: the run stops on a mismatch)
# 3. summary.md: per category and over all, decode tokens/s (the generation loop, prompt excluded, as
#    llama-lookup times it), tokens per step (per target forward), speedup over the tool's own
#    autoregressive run, and wall tokens/s with the prompt included.
set -e
B=build/dspark-bench
O=${O:-out/specbench-lookup}
LIMIT=${LIMIT:-5}
T=${THREADS:-2}
MODEL=${DSPARK_MODEL:-$HOME/.cache/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf}
CATS='["sb-mt", "sb-trans", "sb-sum", "sb-qa", "sb-math", "sb-rag"]'
[ -x $B ] || make
[ -f "$MODEL" ] || make model
LOOKUP=${LLAMA_LOOKUP:-}
if [ -z "$LOOKUP" ]; then
    BIN=$(scripts/build_llamacpp.sh llama-lookup | tail -n 1)
    LOOKUP=$BIN/llama-lookup
fi
[ -x "$LOOKUP" ] || { echo "llama-lookup.sh: $LOOKUP is not an executable" >&2; exit 1; }
mkdir -p $O
[ -f $O/sps.json ] || $B bench-target --model "$MODEL" --threads $T --max-B 16 --reps 9 --out $O/sps.json > $O/sps.txt
for cfg in greedy fixed; do
    [ -f $O/ngram-$cfg.done ] && { echo "llama-lookup.sh: ngram-$cfg done (skipped)"; continue; }
    cat > $O/ngram-$cfg.json <<JSON
{"comment": "experiments/specbench/llama-lookup.sh: ours", "target": "$MODEL", "drafter": {"name": "ngram"},
 "scheduler": "$cfg", "gamma": 8, "datasets": $CATS, "limit": $LIMIT, "temperature": 0, "max_new_tokens": 128,
 "seed": 1, "threads": $T, "sps": "$O/sps.json", "out": "$O/ngram-$cfg.h5", "prompts_out": "$O/prompts-$cfg.jsonl"}
JSON
    echo "llama-lookup.sh: ours, ngram + $cfg ($(date +%H:%M:%S))"
    $B run --config $O/ngram-$cfg.json > $O/ngram-$cfg.txt
    $B report $O/ngram-$cfg.h5 --out $O/ngram-$cfg.md --json $O/ngram-$cfg.metrics.json > /dev/null
    touch $O/ngram-$cfg.done
done
cmp -s $O/prompts-greedy.jsonl $O/prompts-fixed.jsonl || { echo "llama-lookup.sh: the two runs rendered different prompts" >&2; exit 1; }
echo "llama-lookup.sh: llama.cpp ($LOOKUP) ($(date +%H:%M:%S))"
python3 - "$LOOKUP" "$MODEL" "$T" "$O" <<'PY'
import json, os, re, subprocess, sys, time
lookup, model, threads, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
prompts = [json.loads(l) for l in open(f"{out}/prompts-greedy.jsonl")]
res_path = f"{out}/llama.jsonl"
done = set()
if os.path.exists(res_path):
    for l in open(res_path):
        r = json.loads(l)
        done.add((r["request"], r["draft"]))
ctx = max(p["prompt_tokens"] for p in prompts) + 256
ctx = (ctx + 255) // 256 * 256
pat = {k: re.compile(v) for k, v in {
    "encoded": r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds", "decoded": r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds",
    "n_drafted": r"n_drafted\s+=\s+(\d+)", "n_accept": r"n_accept\s+=\s+(\d+)"}.items()}
t0, todo = time.time(), [(p, d) for p in prompts for d in (0, 3, 8) if (p["request"], d) not in done]
with open(res_path, "a") as res:
    for i, (p, d) in enumerate(todo):
        # -f drops one trailing newline (our prompts end in "assistant\n"): give it one to drop;
        # --no-escape: the text is literal (a backslash sequence in a math prompt stays as written)
        with open(f"{out}/prompt.txt", "w") as f:
            f.write(p["text"] + "\n")
        cmd = [lookup, "-m", model, "-f", f"{out}/prompt.txt", "--no-escape", "-n", "128", "--temp", "0", "--seed", "1",
               "-t", threads, "-tb", threads, "-c", str(ctx), "--spec-draft-n-max", str(d)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        log = r.stdout + r.stderr
        m = {k: v.search(log) for k, v in pat.items()}
        if r.returncode != 0 or not all(m.values()):
            sys.exit(f"llama-lookup.sh: {' '.join(cmd)} failed (exit {r.returncode}):\n{log[-2000:]}")
        if int(m["encoded"].group(1)) != p["prompt_tokens"]:
            sys.exit(f"llama-lookup.sh: request {p['request']}: llama.cpp encoded {m['encoded'].group(1)} prompt tokens, "
                     f"we {p['prompt_tokens']}: not the same prompt")
        row = {"request": p["request"], "dataset": p["dataset"], "draft": d, "prompt_tokens": p["prompt_tokens"],
               "llama_prompt_tokens": int(m["encoded"].group(1)), "t_encode": float(m["encoded"].group(2)),
               "tokens": int(m["decoded"].group(1)), "t_decode": float(m["decoded"].group(2)),
               "drafted": int(m["n_drafted"].group(1)), "accepted": int(m["n_accept"].group(1))}
        # the generated text: stdout echoes the prompt, then the output; cut at the end-of-turn token
        gen = r.stdout.split(p["text"], 1)[1] if p["text"] in r.stdout else None
        if gen is not None:
            row["eos"] = "<|im_end|>" in gen
            row["output"] = gen.split("<|im_end|>", 1)[0] if row["eos"] else gen.rstrip("\n")
        res.write(json.dumps(row) + "\n")
        res.flush()
        el = time.time() - t0
        print(f"\rllama-lookup {i + 1}/{len(todo)}  {(i + 1) / el:.2f} runs/s  ETA {int(el / (i + 1) * (len(todo) - i - 1))} s", end="",
              file=sys.stderr, flush=True)
print(file=sys.stderr)
PY
python3 - "$O" "$LOOKUP" > $O/summary.md <<'PY'
import json, subprocess, sys
out, lookup = sys.argv[1], sys.argv[2]
cats = ["sb-mt", "sb-trans", "sb-sum", "sb-qa", "sb-math", "sb-rag", "all"]
ours = {c: {g["group"].replace("dataset:", ""): g for g in json.load(open(f"{out}/ngram-{c}.metrics.json"))} for c in ("greedy", "fixed")}
rows = [json.loads(l) for l in open(f"{out}/llama.jsonl")]
def llama(draft, cat):
    v = [r for r in rows if r["draft"] == draft and (cat == "all" or r["dataset"] == cat)]
    tok, dec, enc = sum(r["tokens"] for r in v), sum(r["t_decode"] for r in v), sum(r["t_encode"] for r in v)
    steps = sum(r["tokens"] - r["accepted"] for r in v)  # one target forward per emitted-but-not-accepted token
    return {"n": len(v), "tok_s": tok / dec, "tau": tok / steps, "wall_tok_s": tok / (dec + enc), "dec": dec, "tok": tok}
def cell(tok_s, tau, ref):
    return f"{tok_s:.1f} ({tau:.2f}, {tok_s / ref:.2f}x)"
cpu = subprocess.run(["sh", "-c", "grep -m1 'kernels:' " + out + "/sps.txt"], capture_output=True, text=True).stdout.strip()
print("# Prompt-lookup decoding: dspark-bench `ngram` beside llama.cpp's `llama-lookup`\n")
print(f"{cpu}  \nllama.cpp: {lookup}; same GGUF (SmolLM2-135M-Instruct Q4_1), greedy, same threads, same rendered prompts.\n")
print("Each cell: **decode tokens/s** (the generation loop, prompt excluded) (tokens per target forward, speedup over the "
      "same tool's autoregressive run on the same prompts). dspark-bench's autoregressive run alternates with the speculative "
      "one in the same process; llama.cpp's is `llama-lookup --spec-draft-n-max 0`, run alternately with the others.\n")
print("| category | prompts | dspark-bench AR | ngram + greedy (gamma 8) | ngram + fixed gamma 8 | llama.cpp AR | llama-lookup (draft 3, its default) | llama-lookup (draft 8) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for c in cats:
    g, f = ours["greedy"][c], ours["fixed"][c]
    ar = g["ar_tokens"] / g["ar_decode_s"]
    l0, l3, l8 = llama(0, c), llama(3, c), llama(8, c)
    name = "**all**" if c == "all" else c
    print(f"| {name} | {g['prompts']} | {ar:.1f} | {cell(g['sp_tokens'] / g['sp_decode_s'], g['tau'], ar)} | "
          f"{cell(f['sp_tokens'] / f['sp_decode_s'], f['tau'], f['ar_tokens'] / f['ar_decode_s'])} | {l0['tok_s']:.1f} | "
          f"{cell(l3['tok_s'], l3['tau'], l0['tok_s'])} | {cell(l8['tok_s'], l8['tau'], l0['tok_s'])} |")
g, a0, a3, a8 = ours["greedy"]["all"], llama(0, "all"), llama(3, "all"), llama(8, "all")
print("\nWall tokens/s over all prompts (prompt processing included): dspark-bench AR %.1f, ngram + greedy %.1f; "
      "llama.cpp AR %.1f, llama-lookup draft 3 %.1f, draft 8 %.1f." % (
          g["ar_tokens"] / g["ar_wall_s"], g["sp_tokens"] / g["sp_wall_s"], a0["wall_tok_s"], a3["wall_tok_s"], a8["wall_tok_s"]))
def differs(a, b):  # two outputs of one prompt; a run cut by the length limit is compared on its prefix
    n = min(len(a["output"]), len(b["output"]))
    return a["output"][:n] != b["output"][:n] or (a["eos"] and len(b["output"]) > n) or (b["eos"] and len(a["output"]) > n)
by = {}
for r in rows:
    by.setdefault(r["request"], {})[r["draft"]] = r
for k in (3, 8):
    pairs = [(v[0], v[k]) for v in by.values() if "output" in v.get(0, {}) and "output" in v.get(k, {})]
    print(f"\nllama-lookup draft {k}: its output differs from llama.cpp's own autoregressive output on "
          f"{sum(differs(a, b) for a, b in pairs)} of {len(pairs)} requests (compared up to the shorter one).", end="")
print()
bad = sum(r["prompt_tokens"] != r["llama_prompt_tokens"] for r in rows)
print(f"\nPrompt tokens: llama.cpp's count equals ours on {len(rows) - bad} of {len(rows)} runs. Tokens generated: "
      f"dspark-bench {g['sp_tokens']} (at most 128 a request), llama.cpp {a0['tok']} / {a3['tok']} / {a8['tok']} (its loop stops after "
      "more than 128, so a request can overshoot by a round). Our temperature-0 outputs equal our baseline's on "
      f"{g['identical']} of {g['pairs']} requests.")
PY
cat $O/summary.md
