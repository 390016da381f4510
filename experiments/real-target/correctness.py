#!/usr/bin/env python3
"""correctness.py - the runtime on a real model against a float64 reference and llama.cpp.

    ~/.cache/dspark-bench/venv/bin/python experiments/real-target/correctness.py [MODEL] [--n 6] [--gen 48]

MODEL: a name or GGUF path (default qwen2.5-coder-1.5b). Needs numpy and gguf in the venv; the llama.cpp
columns use the peer scripts/build_llamacpp.sh built (its libllama.so) through the Python bindings of
the same sdist, unpacked beside it (no second build: pip install diskcache jinja2 is all they need).

For each of N prompts (HumanEval's first, through the model's chat template, from the data root;
else the project's Spec-Bench prompts):
 1. ours, --exact: the prompt's ids and GEN greedy tokens (`dspark-bench score`);
 2. the float64 reference (tests/ref/ref_forward.py: gguf-py's dequantization, every product in
    float64) over prompt + those tokens in one causal pass: its argmax at each of the GEN positions
    must be our next token, which is the same as its own greedy continuation being ours (by
    induction over the positions). A first divergence is reported with the reference's top-2 gap;
 3. ours on the int8 contract, teacher-forced over the same sequences: top-1 agreement with the
    reference on every position, beside llama.cpp's own agreement on the same positions, and both
    greedy texts (int8, llama.cpp) from the prompt.
Writes build/real-target/correctness.json and prints a markdown report. Budget: about 6-10 minutes
for the 1.5B on two cores (the reference's passes; it holds the weights as float32, ~7 GB).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
from ref_forward import RefModel  # noqa: E402


def model_path(name):
    if "/" in name:
        return name
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts/fetch_model.py"), "--list"], capture_output=True,
                       text=True, check=True)
    files = {l.split()[0]: l.split()[1] for l in r.stdout.splitlines()}
    if name not in files:
        raise SystemExit("correctness: unknown model %r (known: %s)" % (name, ", ".join(files)))
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "dspark-bench", files[name])


def prompts(n):
    root = os.environ.get("DSPARK_DATA") or os.path.join(ROOT, "..", "shared", "datasets")
    he = os.path.join(root, "humaneval", "deepspec_humaneval.jsonl")
    src = he if os.path.exists(he) else os.path.join(ROOT, "datasets/prompts/specbench-mini.jsonl")
    out = []
    with open(src, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line)["turns"][0])
            if len(out) == n:
                break
    return out, src


def score(binary, model, rows, extra, tmp):
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    r = subprocess.run([binary, "score", "--model", model, "--in", tmp] + extra, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("correctness: score failed: " + r.stderr.strip())
    return [json.loads(l) for l in r.stdout.splitlines()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="qwen2.5-coder-1.5b")
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--gen", type=int, default=48)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/dspark-bench"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build/real-target"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tmp = os.path.join(a.out, "score-in.jsonl")
    texts, src = prompts(a.n)
    t0 = time.time()
    exact = score(a.bin, a.model, [{"prompt": t, "greedy": a.gen} for t in texts], ["--exact"], tmp)
    seqs = [e["ids"] + e["greedy"] for e in exact]
    int8 = score(a.bin, a.model, [{"ids": s} for s in seqs], [], tmp)
    int8_greedy = score(a.bin, a.model, [{"ids": e["ids"], "greedy": a.gen} for e in exact], [], tmp)
    print("ours: %.0f s" % (time.time() - t0), file=sys.stderr)
    t0 = time.time()
    ref = RefModel(model_path(a.model), store=np.float32)
    print("reference loaded: %.0f s" % (time.time() - t0), file=sys.stderr)
    llama = None
    lcpp = os.environ.get("LLAMACPP_DIR") or os.path.expanduser("~/.cache/dspark-bench/llamacpp")
    py = os.path.join(lcpp, "llama_cpp_python-0.3.36")
    if os.path.isdir(py):
        sys.path.insert(0, py)
        os.environ.setdefault("LLAMA_CPP_LIB_PATH", os.path.join(lcpp, "build", "bin"))
    try:
        from llama_cpp import Llama
        llama = Llama(model_path=model_path(a.model), n_ctx=2048, logits_all=True, n_threads=2, verbose=False)
    except Exception as e:  # reported, not hidden
        print("correctness: llama.cpp columns left out (%s)" % e, file=sys.stderr)
    res = {"model": a.model, "prompts_from": os.path.relpath(src, ROOT), "gen": a.gen, "prompts": []}
    agree = {"int8": 0, "llama": 0, "n": 0}
    for k, (e, s, q8, g8) in enumerate(zip(exact, seqs, int8, int8_greedy)):
        t1 = time.time()
        z = ref.forward(s)  # (len(s), V) float64
        top1 = np.argmax(z, axis=1)
        n_p = len(e["ids"])
        diverge = None
        for i in range(a.gen):
            if int(top1[n_p - 1 + i]) != e["greedy"][i]:
                row = np.sort(z[n_p - 1 + i])[::-1]
                diverge = {"at": i, "ref": int(top1[n_p - 1 + i]), "ours": e["greedy"][i], "ref_gap": float(row[0] - row[1])}
                break
        ours_top1 = [r[0][0] for r in q8["top"]]
        n = len(s)
        a8 = sum(int(top1[i]) == ours_top1[i] for i in range(n))
        entry = {"prompt_tokens": n_p, "positions": n, "exact_greedy_equal": diverge is None, "diverge": diverge,
                 "int8_top1_agree": a8, "int8_greedy": g8["greedy"]}
        agree["int8"] += a8
        agree["n"] += n
        if llama is not None:
            llama.reset()
            llama.eval(s)
            lz = np.array(llama.scores[:n])
            al = int(np.sum(np.argmax(lz, axis=1) == top1))
            agree["llama"] += al
            entry["llama_top1_agree"] = al
            llama.reset()
            lg = []
            llama.eval(e["ids"])
            for _ in range(a.gen):
                t = int(np.argmax(llama.scores[llama.n_tokens - 1]))
                lg.append(t)
                llama.eval([t])
            entry["llama_greedy"] = lg
        res["prompts"].append(entry)
        print("prompt %d/%d: %d positions, exact greedy %s, int8 top-1 %d/%d%s (%.0f s)" % (
            k + 1, len(exact), n, "equal" if diverge is None else "diverges at %d" % diverge["at"], a8, n,
            "" if llama is None else ", llama.cpp %d/%d" % (entry["llama_top1_agree"], n), time.time() - t1),
            file=sys.stderr)
    res["agree"] = agree
    with open(os.path.join(a.out, "correctness.json"), "w") as f:
        json.dump(res, f, indent=1)
    eq = sum(p["exact_greedy_equal"] for p in res["prompts"])
    print("| check | result |\n|---|---|")
    print("| `--exact` greedy, %d tokens, equal to the float64 reference | %d of %d prompts |" % (a.gen, eq, len(exact)))
    print("| int8 contract, teacher-forced top-1 = float64's | %d / %d = %.1f %% |" % (
        agree["int8"], agree["n"], 100.0 * agree["int8"] / agree["n"]))
    if llama is not None:
        print("| llama.cpp (same file), teacher-forced top-1 = float64's | %d / %d = %.1f %% |" % (
            agree["llama"], agree["n"], 100.0 * agree["llama"] / agree["n"]))
        same = sum(p["llama_greedy"] == p["int8_greedy"] for p in res["prompts"])
        print("| int8 greedy = llama.cpp greedy (%d tokens) | %d of %d prompts |" % (a.gen, same, len(exact)))
    for p in res["prompts"]:
        if p["diverge"]:
            print("\nexact greedy diverges at token %(at)d: reference %(ref)d, ours %(ours)d, the reference's top-2 gap "
                  "%(ref_gap).3g" % p["diverge"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
