#!/usr/bin/env python3
"""Regenerate the test fixtures in tests/fixtures/ (deterministically).

How to run (from the repository root):

    ~/.cache/dspark-bench/venv/bin/python tests/ref/make_fixtures.py
    # or a subset:  ... make_fixtures.py --only dequant,tokenizer,smollm2

Needs:
  * the venv at ~/.cache/dspark-bench/venv with numpy, gguf (gguf-py) and
    llama-cpp-python (built from source, e.g.
    CMAKE_ARGS="-DGGML_NATIVE=ON" ~/.cache/dspark-bench/venv/bin/pip install llama-cpp-python)
  * the model ~/.cache/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf
    (sha256 b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53),
    override with --model.
  * a few minutes of CPU (2 cores): the numpy float64 reference does
    8 prompts x 64 greedy tokens plus one teacher-forced pass per prompt.

Outputs:
  tests/fixtures/dequant.json        gguf-py dequantization of seeded random blocks
                                     (F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, Q5_0)
  tests/fixtures/tokenizer_ids.json  llama.cpp tokenizer ids (+ detokenized round trip)
  tests/fixtures/smollm2_ref.json    numpy-reference vs llama.cpp greedy / teacher-forced data

Layout of smollm2_ref.json "prompts[k].tf": sequence S = prompt_ids + greedy_ref
(length N = len(prompt_ids) + 64). Every per-position list has N entries; entry i
is computed from the logits after consuming S[0..i] (i.e. the prediction for
S[i+1]; the last entry predicts the token after the 64th generated one).
  top1_ref[i]            numpy argmax
  topk_ids[i]            8 highest numpy logits, ids (descending, ties -> lower id)
  topk_logits[i]         their numpy logits, rounded to 5 decimals
  topk_logits_llamacpp[i] llama.cpp's logits for the same 8 ids, rounded to 5 decimals
  top1_llamacpp[i]       llama.cpp argmax (whole sequence evaluated in one batch)
For positions i >= len(prompt_ids)-1, top1_ref[i] == greedy_ref[i-len(prompt_ids)+1]
(checked: the numpy greedy run uses a KV cache, the teacher-forced pass does not).
The sha256 of the model is not recomputed by consumers unless they want to.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(ROOT, "tests", "fixtures")
sys.path.insert(0, HERE)

DEFAULT_MODEL = os.path.expanduser("~/.cache/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
N_GEN = 64
TOPK = 8
N_THREADS = 2

SYSTEM_MSG = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

USER_PROMPTS = [
    # math
    "What is 17 * 23? Explain step by step.",
    "Solve for x: 3x + 7 = 22.",
    # code
    "Write a Python function that checks whether a number is prime.",
    "Write a C function that reverses a string in place.",
    "How do I read a JSON file in JavaScript?",
    # chat
    "Hi! Can you recommend a good book for a long train ride?",
    "What is the capital of France, and what is it famous for?",
    "Explain why the sky is blue in two sentences.",
]


def chatml(user: str) -> str:
    """SmolLM2 tokenizer.chat_template with the default system message and add_generation_prompt."""
    return (f"<|im_start|>system\n{SYSTEM_MSG}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n")


def dump(path: str, obj, compact: bool = False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------- dequant
def make_dequant():
    from gguf import GGMLQuantizationType as QT
    from gguf.quants import dequantize

    rng = np.random.default_rng(20240611)
    # (name, type id, block bytes, block elems, offsets of f16 scale fields)
    specs = [
        ("F16", 1, 2, 1, None),
        ("BF16", 30, 2, 1, None),
        ("Q4_0", 2, 18, 32, [0]),
        ("Q4_1", 3, 20, 32, [0, 2]),
        ("Q8_0", 8, 34, 32, [0]),
        ("Q4_K", 12, 144, 256, [0, 2]),
        ("Q6_K", 14, 210, 256, [208]),
        ("Q5_0", 6, 22, 32, [0]),  # appended last: the earlier types' random blocks stay the same
    ]
    out = {"generator": "tests/ref/make_fixtures.py (gguf-py dequantize)", "seed": 20240611, "types": []}
    for name, tid, bsz, belems, scale_offs in specs:
        qt = QT[name]
        assert int(qt) == tid, (name, int(qt), tid)
        if belems == 1:  # F16 / BF16: 64 elements of random bits, forced finite
            n_el = 64
            u = rng.integers(0, 1 << 16, size=n_el, dtype=np.uint16)
            if name == "F16":
                # exponent 0x1f (inf/nan) -> clear its top exponent bit
                bad = (u & 0x7C00) == 0x7C00
                u[bad] &= ~np.uint16(0x4000)
                u[:6] = [0x0000, 0x8000, 0x0001, 0x03FF, 0x7BFF, 0x3C00]  # 0,-0,min subnormal,max subnormal,65504,1
            else:
                bad = (u & 0x7F80) == 0x7F80
                u[bad] &= ~np.uint16(0x4000)
                u[:6] = [0x0000, 0x8000, 0x0001, 0x007F, 0x7F7F, 0x3F80]  # 0,-0,subnormals,max finite,1
            raw = u.astype("<u2").tobytes()
            n_blocks = None
        else:
            n_blocks = 4
            buf = bytearray(rng.integers(0, 256, size=n_blocks * bsz, dtype=np.uint8).tobytes())
            for b in range(n_blocks):
                for off in scale_offs:
                    val = np.float16(rng.uniform(-0.1, 0.1))
                    if name == "Q4_K":  # keep d / dmin moderate and positive-ish like real data
                        val = np.float16(rng.uniform(0.0005, 0.05) * (1 if off == 0 else rng.choice([-1, 1])))
                    buf[b * bsz + off: b * bsz + off + 2] = val.tobytes()
            raw = bytes(buf)
            n_el = n_blocks * belems
        vals = dequantize(np.frombuffer(raw, dtype=np.uint8).copy(), qt).astype(np.float32).reshape(-1)
        assert vals.size == n_el, (name, vals.size, n_el)
        assert np.all(np.isfinite(vals)), name
        out["types"].append({
            "type": name, "type_id": tid, "block_bytes": bsz, "block_elems": belems,
            "n_blocks": n_blocks, "n_elements": n_el,
            "bytes": raw.hex(),
            "values": [float(x) for x in vals],  # exact float32 values (shortest double repr)
        })
        print(f"  dequant {name:5s}: {n_el} values, range [{vals.min():.4g}, {vals.max():.4g}]")
    dump(os.path.join(FIX, "dequant.json"), out)


# ------------------------------------------------------------------- tokenizer
TOKENIZER_CASES = [
    # ASCII
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you today?",
    "a",
    "antidisestablishmentarianism",
    "https://example.com/path/to/page?q=1&r=two#frag",
    # contractions
    "It's a dog's life, isn't it? They're here, we've gone, I'm sure you'll see, he'd know.",
    "DON'T SHOUT. IT'S FINE, WE'RE OK, I'VE SEEN, I'M HERE, YOU'LL SEE, HE'D GO.",
    "don't can't won't shouldn't y'all o'clock",
    "She'S wE'Re i'M yoU'Ll",
    # numbers
    "12345",
    "3.14159",
    "1,000,000",
    "9876543210123456789",
    "The year 2024 had 366 days; -42, +7e-10 and 0.000001.",
    # UTF-8 multi-byte
    "café naïve résumé façade",
    "Größe, Straße, übermäßig schön",
    "Où est la bibliothèque ? C'était l'été, à côté.",
    "Привет, как дела? Всё хорошо.",
    "Καλημέρα κόσμε",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    # emoji
    "I love pizza 🍕🍕!",
    "👨‍👩‍👧‍👦 family and 👩🏽‍💻 coder",
    "🇫🇷🇯🇵🇺🇸 flags",
    "👍🏽 ok ❤️",
    # CJK
    "你好，世界！我喜欢编程。",
    "こんにちは世界。カタカナとひらがな。",
    "안녕하세요 세계",
    # whitespace
    "  leading spaces",
    "trailing spaces   ",
    "multiple    spaces   between  words",
    "tab\tseparated\tvalues",
    "\n\n\n",
    " \n ",
    "line one\r\nline two\r\n",
    "     ",
    " ",
    "\t\t  \n  x",
    # code
    "def f(x):\n    return x ** 2 + 1\n\nprint(f(3))\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    r"^[A-Za-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}$",
    "cat log.txt | grep -i error | sort | uniq -c | sort -rn | head -n 10 > out.txt 2>&1",
    # punctuation runs
    "!!!???...,,,;;;:::",
    "----====****____####",
    "((([[[{{{}}}]]])))",
    "\"quoted\" 'single' `backtick` «guillemets» — dash … ellipsis",
    # mixed scripts
    "English, русский, 中文, and العربية in one line 🌍",
    "Tokyo東京2024年オリンピック",
    # empty
    "",
    # special-token text must NOT map to special ids with special=False
    "<|im_start|>user",
    "<|im_end|>",
    "<|endoftext|>",
]

SPECIAL_CASES = [
    chatml("What is 2+2?"),
    "<|im_start|>user\nHi<|im_end|>\n",
    "<|im_start|>user",
    "<|endoftext|>Hello<|im_end|>",
    (f"<|im_start|>system\n{SYSTEM_MSG}<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
     "<|im_start|>assistant\nHi! How can I help?<|im_end|>\n<|im_start|>user\nTell me a joke.<|im_end|>\n"
     "<|im_start|>assistant\n"),
]


def detok_str(vocab_llm, ids, special: bool):
    b = vocab_llm.detokenize(ids, special=special)
    try:
        return b.decode("utf-8"), True
    except UnicodeDecodeError:
        return b.decode("utf-8", errors="replace"), False


def make_tokenizer(model_path: str):
    import llama_cpp

    v = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    out = {"generator": "tests/ref/make_fixtures.py (llama-cpp-python %s)" % llama_cpp.__version__,
           "model_sha256": MODEL_SHA256, "add_bos": False, "special": False, "cases": [], "special_cases": []}
    bad = []
    for text in TOKENIZER_CASES:
        ids = v.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        d, ok = detok_str(v, ids, special=False)
        out["cases"].append({"text": text, "ids": ids, "detok": d})
        if not ok or d != text:
            bad.append(text)
    for text in SPECIAL_CASES:
        ids = v.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        d, ok = detok_str(v, ids, special=True)
        out["special_cases"].append({"text": text, "ids": ids, "detok": d, "detok_special": True})
        if not ok or d != text:
            bad.append(text)
    # sanity: "<|im_start|>user" with special=False must not contain the special id
    im_start = v.tokenize(b"<|im_start|>", add_bos=False, special=True)
    assert len(im_start) == 1, im_start
    lit = next(c for c in out["cases"] if c["text"] == "<|im_start|>user")
    assert im_start[0] not in lit["ids"], lit
    sp = next(c for c in out["special_cases"] if c["text"] == "<|im_start|>user")
    assert sp["ids"][0] == im_start[0], sp
    out["special_token_ids"] = {
        "<|endoftext|>": v.tokenize(b"<|endoftext|>", add_bos=False, special=True),
        "<|im_start|>": im_start,
        "<|im_end|>": v.tokenize(b"<|im_end|>", add_bos=False, special=True),
    }
    out["roundtrip_failures"] = bad
    print(f"  tokenizer: {len(out['cases'])} cases, {len(out['special_cases'])} special cases, "
          f"round-trip failures: {len(bad)} {bad!r}")
    dump(os.path.join(FIX, "tokenizer_ids.json"), out)


# --------------------------------------------------------------------- smollm2
def make_smollm2(model_path: str, n_prompts: int | None = None):
    import llama_cpp
    import gguf
    from ref_forward import RefModel

    sha = sha256_file(model_path)
    if sha != MODEL_SHA256:
        print(f"WARNING: model sha256 {sha} != expected {MODEL_SHA256}", file=sys.stderr)

    t0 = time.time()
    ref = RefModel(model_path)
    print(f"  numpy reference loaded in {time.time() - t0:.1f}s")
    vocab = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=512, n_batch=512, n_ubatch=512,
                          n_threads=N_THREADS, n_threads_batch=N_THREADS, logits_all=True,
                          flash_attn=False, seed=0, verbose=False)
    tmpl = _chat_template(model_path)

    prompts = []
    t_ref_gen = t_ref_tf = t_lc = 0.0
    tot_pos = agree = 0
    max_d = 0.0
    sum_d = 0.0
    n_d = 0
    disagreements = []
    greedy_match = []
    first_div = []
    consistent = True
    users = USER_PROMPTS[:n_prompts] if n_prompts else USER_PROMPTS
    for pi, user in enumerate(users):
        text = chatml(user)
        if tmpl is not None:  # the hand-written ChatML string must equal the GGUF template's rendering
            assert tmpl.render(messages=[{"role": "user", "content": user}], add_generation_prompt=True) == text
        ids = vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True)

        # numpy greedy (KV cache), 64 tokens, never stopping at EOS
        t = time.time()
        g_ref = ref.generate_greedy(ids, N_GEN)
        t_ref_gen += time.time() - t

        # llama.cpp greedy: incremental eval, argmax of the last logits
        t = time.time()
        llm.reset()
        llm.eval(ids)
        g_lc = []
        for _ in range(N_GEN):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            g_lc.append(tok)
            if len(g_lc) < N_GEN:
                llm.eval([tok])
        t_lc += time.time() - t

        # teacher forcing over prompt + greedy_ref
        seq = ids + g_ref
        t = time.time()
        L = ref.forward(seq)  # (N, vocab) float64, no cache
        t_ref_tf += time.time() - t
        t = time.time()
        llm.reset()
        llm.eval(seq)
        LL = np.array(llm.scores[: len(seq)], dtype=np.float64)
        t_lc += time.time() - t

        top1_ref = [int(x) for x in np.argmax(L, axis=1)]
        top1_lc = [int(x) for x in np.argmax(LL, axis=1)]
        order = np.argsort(-L, axis=1, kind="stable")[:, :TOPK]
        topk_ids = [[int(x) for x in row] for row in order]
        topk_log = [[round(float(L[i, j]), 5) for j in row] for i, row in enumerate(order)]
        topk_lc = [[round(float(LL[i, j]), 5) for j in row] for i, row in enumerate(order)]

        P = len(ids)
        if top1_ref[P - 1:P - 1 + N_GEN] != g_ref:
            consistent = False
            print(f"  WARNING prompt {pi}: KV-cache greedy != full-pass argmax", file=sys.stderr)
        for i in range(len(seq)):
            d = np.abs(L[i, order[i]] - LL[i, order[i]])
            max_d = max(max_d, float(d.max()))
            sum_d += float(d.sum())
            n_d += d.size
            if top1_ref[i] == top1_lc[i]:
                agree += 1
            else:
                a, b = top1_ref[i], top1_lc[i]
                disagreements.append({
                    "prompt": pi, "pos": i, "ref": a, "llamacpp": b,
                    "ref_logits": [round(float(L[i, a]), 5), round(float(L[i, b]), 5)],
                    "llamacpp_logits": [round(float(LL[i, a]), 5), round(float(LL[i, b]), 5)],
                })
        tot_pos += len(seq)
        greedy_match.append(g_ref == g_lc)
        fd = next((k for k in range(N_GEN) if g_ref[k] != g_lc[k]), None)
        first_div.append(fd)

        prompts.append({
            "user": user,
            "prompt_text": text,
            "prompt_ids": ids,
            "greedy_ref": g_ref,
            "greedy_llamacpp": g_lc,
            "tf": {
                "n_positions": len(seq),
                "top1_ref": top1_ref,
                "top1_llamacpp": top1_lc,
                "topk_ids": topk_ids,
                "topk_logits": topk_log,
                "topk_logits_llamacpp": topk_lc,
            },
        })
        dec = vocab.detokenize(g_ref, special=True).decode("utf-8", errors="replace")
        print(f"  [{pi}] {len(ids)} prompt ids, greedy match={g_ref == g_lc} (first div {fd}), "
              f"tf top1 agree {sum(a == b for a, b in zip(top1_ref, top1_lc))}/{len(seq)}")
        print(f"      {user!r} -> {dec[:100]!r}")

    summary = {
        "n_prompts": len(prompts),
        "n_gen": N_GEN,
        "topk": TOPK,
        "positions": tot_pos,
        "top1_agree": agree,
        "top1_agreement": round(agree / tot_pos, 6),
        "top1_disagreements": disagreements,
        "greedy_match": greedy_match,
        "greedy_match_count": sum(greedy_match),
        "greedy_first_divergence": first_div,
        "max_abs_dlogit_top8": round(max_d, 5),
        "mean_abs_dlogit_top8": round(sum_d / n_d, 5),
        "greedy_ref_equals_tf_top1_ref": consistent,
        "note": ("llama.cpp's CPU matmuls quantize activations to Q8_1/Q8_0 blocks of 32 and keep K/V in f16; "
                 "tests/ref/diag_llamacpp_ops.py shows each op of the float64 reference matches llama.cpp's to "
                 "~1e-7 relative once that is emulated, so the logit differences here are that quantization noise "
                 "accumulated over 30 layers; every top-1 disagreement is a near-tie."),
        "llamacpp": {"n_threads": N_THREADS, "n_batch": 512, "flash_attn": False, "kv_cache": "f16", "tf_eval": "whole sequence in one batch",
                     "greedy_eval": "prompt in one batch, then one token per eval"},
        "versions": {"llama_cpp_python": llama_cpp.__version__, "numpy": np.__version__,
                     "gguf": getattr(gguf, "__version__", None) or _pkg_version("gguf")},
    }
    out = {
        "generator": "tests/ref/make_fixtures.py",
        "model": os.path.basename(model_path),
        "model_sha256": MODEL_SHA256,
        "reference": "tests/ref/ref_forward.py (numpy float64, gguf-py dequantize)",
        "chat_template_system": SYSTEM_MSG,
        "prompts": prompts,
        "summary": summary,
    }
    print(f"  timings: numpy greedy {t_ref_gen:.1f}s, numpy tf {t_ref_tf:.1f}s, llama.cpp (greedy+tf) {t_lc:.1f}s")
    s = dict(summary)
    s.pop("top1_disagreements")
    print("  summary:", json.dumps(s))
    for d in disagreements:
        print("  disagreement:", json.dumps(d))
    dump(os.path.join(FIX, "smollm2_ref.json"), out, compact=True)


def _chat_template(model_path):
    """jinja2 Template of the GGUF's tokenizer.chat_template (None if jinja2 is missing)."""
    try:
        import jinja2
    except ImportError:
        print("  (jinja2 not installed: chat template rendering not cross-checked)")
        return None
    from gguf import GGUFReader
    f = GGUFReader(model_path).fields["tokenizer.chat_template"]
    return jinja2.Environment().from_string(f.contents())


def _pkg_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


def main():
    ap = argparse.ArgumentParser(description="regenerate tests/fixtures/*.json")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--only", default="dequant,tokenizer,smollm2")
    ap.add_argument("--n-prompts", type=int, default=None, help="debug: use only the first N prompts")
    args = ap.parse_args()
    os.makedirs(FIX, exist_ok=True)
    only = set(args.only.split(","))
    if "dequant" in only:
        make_dequant()
    if "tokenizer" in only:
        make_tokenizer(args.model)
    if "smollm2" in only:
        make_smollm2(args.model, args.n_prompts)


if __name__ == "__main__":
    main()
