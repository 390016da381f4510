#!/usr/bin/env python3
"""check_tokenizer.py - the runtime's tokenizer against an independent one, on the same vocabulary.

    scripts/check_tokenizer.py [MODEL] [--n 3000] [--bin build/dspark-bench] [--out DIR]

MODEL is a model name or GGUF path (default qwen2.5-coder-1.5b). The independent implementation is
Hugging Face `tokenizers` (Rust) built from the GGUF's own token list and merges, with the
pre-tokenizer the model's tokenizer.json declares for its pre-tokenizer name (qwen2: its Split regex
then ByteLevel; smollm: digits split, then ByteLevel's GPT-2 regex). The runtime's ids come from
`dspark-bench info MODEL --tokenize`. The corpus (at least 2,000 strings, deterministic): code (the
project's own C and Python sources, line by line and in blocks, and Spec-Bench coding prompts),
unicode (many scripts, emoji, combining marks), whitespace runs (spaces, tabs, CR/LF, NBSP, ideographic
space), digits (numbers, decimals, dates, hex), contractions in any case, and random mixes of all.

Qwen2's tokenizer.json also applies NFC normalization before pre-tokenizing; llama.cpp does not, and
neither does the runtime. The comparison is without it; the script counts the corpus strings NFC
would change (where HF's own pipeline and both C tokenizers would part).

Needs numpy, gguf and tokenizers (pip); exit 1 on any difference, printing the first ones.
Writes DIR/corpus.jsonl and DIR/report.txt (default build/tokcheck).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import unicodedata

from gguf import GGUFReader
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")


def field(r, key):
    f = r.fields.get(key)
    return None if f is None else f.contents()


def hf_tokenizer(path):
    r = GGUFReader(path)
    tokens = field(r, "tokenizer.ggml.tokens")
    merges = field(r, "tokenizer.ggml.merges")
    pre = field(r, "tokenizer.ggml.pre")
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    if pre == "qwen2":
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    elif pre in ("smollm", "starcoder", "refact"):
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=True)])
    else:
        raise SystemExit("check_tokenizer: pre-tokenizer %r has no reference here (qwen2, smollm)" % pre)
    return tk, pre


def corpus(n, seed, root):
    rnd = random.Random(seed)
    out = []
    # code: the project's own sources, line by line and in blocks of a few lines
    src = []
    for d in ("runtime", "cli", "drafters", "engine", "scripts", "tests/ref"):
        for dp, _, fs in os.walk(os.path.join(root, d)):
            for f in sorted(fs):
                if f.endswith((".c", ".h", ".py", ".inc", ".sh")):
                    with open(os.path.join(dp, f), encoding="utf-8", errors="replace") as fh:
                        src.append(fh.read())
    lines = [l for s in src for l in s.split("\n")]
    for _ in range(n // 4):
        out.append(rnd.choice(lines))
    for _ in range(n // 8):
        s = rnd.choice(src).split("\n")
        i = rnd.randrange(len(s))
        out.append("\n".join(s[i:i + rnd.randint(2, 12)]))
    # Spec-Bench prompts that come with the project (coding, math, translation)
    with open(os.path.join(root, "datasets/prompts/specbench-mini.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                out.extend(json.loads(line)["turns"])
    words = ("the quick brown fox jumps over lazy dogs def return while for lambda self None print café naïve "
             "Straße résumé Ελληνικά русский язык 中文 日本語です 한국어 العربية עברית हिन्दी ไทย 😀 👩‍💻 🇫🇷 ✓ ∑ ∞ "
             "e\u0301 a\u0308 n\u0303 Å ﬁ ß ǅ").split()
    spaces = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\n ", "  \n  ", "\u00a0", "\u3000",
              "\u2009", "\u2028", " \t ", "\r", "\n\n\n    "]
    contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "'x", "'"]
    punct = list("()[]{}<>.,;:!?\"'`~@#$%^&*-_=+|\\/") + ["...", "->", "=>", "::", "//", "/*", "*/", "#!", "```"]

    def number():
        k = rnd.randrange(7)
        if k == 0:
            return str(rnd.randrange(10 ** rnd.randint(1, 12)))
        if k == 1:
            return "%.*f" % (rnd.randint(1, 6), rnd.uniform(-1e4, 1e4))
        if k == 2:
            return "{:,}".format(rnd.randrange(10 ** 9))
        if k == 3:
            return "%04d-%02d-%02d" % (rnd.randint(1900, 2099), rnd.randint(1, 12), rnd.randint(1, 28))
        if k == 4:
            return hex(rnd.randrange(1 << 32))
        if k == 5:
            return "١٢٣٤" if rnd.random() < 0.5 else "²³½Ⅻ"
        return "3.14159e-%d" % rnd.randint(1, 30)

    while len(out) < n:
        parts = []
        for _ in range(rnd.randint(1, 14)):
            k = rnd.randrange(6)
            if k == 0:
                parts.append(rnd.choice(words))
            elif k == 1:
                parts.append(rnd.choice(spaces))
            elif k == 2:
                parts.append(number())
            elif k == 3:
                parts.append(rnd.choice(contractions))
            elif k == 4:
                parts.append(rnd.choice(punct))
            else:
                parts.append("".join(chr(rnd.choice([rnd.randint(0x20, 0x7e), rnd.randint(0xa0, 0x24f),
                                                     rnd.randint(0x370, 0x52f), rnd.randint(0x4e00, 0x9fff),
                                                     rnd.randint(0x1f300, 0x1f64f), rnd.randint(0x600, 0x6ff)]))
                                     for _ in range(rnd.randint(1, 6))))
        out.append("".join(parts))
    return [s for s in out if s][:max(n, len(out))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="qwen2.5-coder-1.5b")
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default="build/dspark-bench")
    ap.add_argument("--out", default="build/tokcheck")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = a.model
    if "/" not in path:
        r = subprocess.run([sys.executable, os.path.join(root, "scripts/fetch_model.py"), "--list"],
                           capture_output=True, text=True, check=True)
        files = {l.split()[0]: l.split()[1] for l in r.stdout.splitlines()}
        if path not in files:
            raise SystemExit("check_tokenizer: unknown model %r (known: %s)" % (path, ", ".join(files)))
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(xdg, "dspark-bench", files[path])
    tk, pre = hf_tokenizer(path)
    texts = corpus(a.n, a.seed, root)
    os.makedirs(a.out, exist_ok=True)
    cpath = os.path.join(a.out, "corpus.jsonl")
    with open(cpath, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    r = subprocess.run([a.bin, "info", a.model, "--tokenize", cpath], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("check_tokenizer: %s failed: %s" % (a.bin, r.stderr.strip()))
    ours = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(ours) == len(texts), (len(ours), len(texts))
    diff = []
    n_tok = 0
    for t, o in zip(texts, ours):
        ref = tk.encode(t, add_special_tokens=False).ids
        n_tok += len(ref)
        if ref != o:
            diff.append((t, ref, o))
    nfc = sum(unicodedata.normalize("NFC", t) != t for t in texts)
    rep = ("tokenizer check: %s (pre-tokenizer %s), %d strings, %d tokens: %d differ from HF tokenizers %s "
           "built from the same tokens and merges; %d strings would change under NFC (not applied by either side)\n"
           % (a.model, pre, len(texts), n_tok, len(diff), __import__("tokenizers").__version__, nfc))
    for t, ref, o in diff[:10]:
        rep += "  %r\n    reference %s\n    runtime   %s\n" % (t, ref, o)
    with open(os.path.join(a.out, "report.txt"), "w") as f:
        f.write(rep)
    print(rep, end="")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
