#!/usr/bin/env python3
"""llama_side.py - llama.cpp's side of experiments/real-pair/run.sh, on our rendered prompts.

    llama_side.py BIN_DIR TARGET.gguf DRAFT.gguf THREADS TEMPERATURE PROMPTS.jsonl OUT.jsonl

Per prompt (the JSON lines `run --prompts-out` writes: request, dataset, text, prompt_tokens), three runs
alternating: llama.cpp's autoregression (llama-lookup with no drafts: its generation loop without a
draft source), llama-speculative with the draft model at its default draft length (3) and at 6. Same
temperature, no top-k / top-p / min-p (what our runs sample with), 128 new tokens, the given threads.
llama.cpp's prompt token count must equal ours (else the prompt differs: exit 1). Resumable: rows
already in OUT.jsonl are skipped. Prints progress (runs/s, ETA) on stderr.
"""
import json
import os
import re
import subprocess
import sys
import time

MODES = {"ar": 0, "spec3": 3, "spec6": 6}
PAT = {k: re.compile(v) for k, v in {
    "encoded": r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds", "decoded": r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds",
    "n_drafted": r"n_drafted\s+=\s+(\d+)", "n_accept": r"n_accept\s+=\s+(\d+)"}.items()}


def main():
    if len(sys.argv) != 8:
        sys.exit(__doc__)
    bin_dir, target, draft, threads, temp, prompts_path, out_path = sys.argv[1:]
    for tool in ("llama-speculative", "llama-lookup"):
        if not os.access(os.path.join(bin_dir, tool), os.X_OK):
            sys.exit(f"llama_side.py: {bin_dir}/{tool} is not an executable (scripts/build_llamacpp.sh {tool})")
    prompts = [json.loads(l) for l in open(prompts_path)]
    done = set()
    if os.path.exists(out_path):
        for l in open(out_path):
            r = json.loads(l)
            done.add((r["request"], r["mode"]))
    ctx = (max(p["prompt_tokens"] for p in prompts) + 256 + 255) // 256 * 256
    tmp = out_path + ".prompt.txt"
    todo = [(p, m) for p in prompts for m in MODES if (p["request"], m) not in done]
    t0 = time.time()
    with open(out_path, "a") as res:
        for i, (p, mode) in enumerate(todo):
            # -f drops one trailing newline (our prompts end in "assistant\n"): give it one to drop;
            # --no-escape: the text is literal
            with open(tmp, "w") as f:
                f.write(p["text"] + "\n")
            n = MODES[mode]
            tool = "llama-lookup" if n == 0 else "llama-speculative"
            cmd = [os.path.join(bin_dir, tool), "-m", target, "-f", tmp, "--no-escape", "-n", "128", "--temp", temp,
                   "--top-k", "0", "--top-p", "1.0", "--min-p", "0", "--seed", "1", "-t", threads, "-tb", threads,
                   "-c", str(ctx), "--spec-draft-n-max", str(n)]
            if n:
                cmd += ["-md", draft, "-td", threads, "-tbd", threads]
            r = subprocess.run(cmd, capture_output=True, text=True)
            log = r.stdout + r.stderr
            m = {k: v.search(log) for k, v in PAT.items()}
            if r.returncode != 0 or not all(m.values()):
                sys.exit(f"llama_side.py: {' '.join(cmd)} failed (exit {r.returncode}):\n{log[-2000:]}")
            if int(m["encoded"].group(1)) != p["prompt_tokens"]:
                sys.exit(f"llama_side.py: request {p['request']}: llama.cpp encoded {m['encoded'].group(1)} prompt tokens, "
                         f"we {p['prompt_tokens']}: not the same prompt")
            row = {"request": p["request"], "dataset": p["dataset"], "mode": mode, "draft_max": n,
                   "prompt_tokens": p["prompt_tokens"], "t_encode": float(m["encoded"].group(2)),
                   "tokens": int(m["decoded"].group(1)), "t_decode": float(m["decoded"].group(2)),
                   "drafted": int(m["n_drafted"].group(1)), "accepted": int(m["n_accept"].group(1))}
            gen = r.stdout.split(p["text"], 1)[1] if p["text"] in r.stdout else None
            if gen is not None:
                row["eos"] = "<|im_end|>" in gen
                row["output"] = gen.split("<|im_end|>", 1)[0] if row["eos"] else gen.rstrip("\n")
            res.write(json.dumps(row) + "\n")
            res.flush()
            el = time.time() - t0
            print(f"\rllama.cpp {i + 1}/{len(todo)}  {(i + 1) / el:.2f} runs/s  ETA {int(el / (i + 1) * (len(todo) - i - 1))} s",
                  end="", file=sys.stderr, flush=True)
    if todo:
        print(file=sys.stderr)
    if os.path.exists(tmp):
        os.remove(tmp)


if __name__ == "__main__":
    main()
