#!/usr/bin/env python3
"""Diagnostic: check the numpy reference op-by-op against llama.cpp's own intermediates.

Not used by the tests; it explains the numpy-vs-llama.cpp logit differences recorded in
tests/fixtures/smollm2_ref.json ("summary"). It runs one llama.cpp decode of the given ids
with an eval callback (cb_eval) that copies every contiguous F32 graph tensor
(attn_norm-N, Qcur-N, Kcur-N, Vcur-N, kqv_out-N, attn_out-N, ffn_norm-N, ffn_gate-N,
ffn_up-N, ffn_swiglu-N, ffn_out-N, result_norm, result_output, ...), then feeds llama.cpp's
INPUT of each op to the numpy op and compares with llama.cpp's OUTPUT:

  * matmuls: exact float64 (what ref_forward.py does) and an emulation of the ggml CPU
    path, which quantizes the activation row to Q8_1 (Q4_1 weights) or Q8_0 (Q8_0 head)
    in blocks of 32 before the integer dot product. The emulation matches to ~1e-7, so
    the dequantized weights and the matmul semantics of the reference are exact; the
    ~0.3-1% per-matmul difference of the plain reference is activation quantization.
  * RoPE: adjacent-pair rotation (ref) vs NEOX half-split vs none.
  * attention (softmax(QK^T/8 + causal) V, GQA) from llama.cpp's own Q, K, V.

Brittle: it reads struct ggml_tensor fields at fixed offsets
(type@0, ne@16, nb@48, data@248, name@256) valid for ggml 0.9.x / llama-cpp-python 0.3.x
on 64-bit Linux; it sanity-checks the names it reads.

Usage:
  ~/.cache/dspark-bench/venv/bin/python tests/ref/diag_llamacpp_ops.py [--ids 1,2,3] [--layers 0,1,15,29]
(default ids: the first 60 tokens of prompt 2 + its greedy continuation from the fixture.)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ref_forward import RefModel  # noqa: E402

DEFAULT_MODEL = os.path.expanduser("~/.cache/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf")


def capture(model_path: str, ids, n_threads=2):
    import llama_cpp as lc

    caps = {}

    @lc.ggml_backend_sched_eval_callback
    def cb(t, ask, ud):
        if ask:
            return True
        base = ctypes.cast(t, ctypes.c_void_p).value
        raw = ctypes.string_at(base + 256, 64).split(b"\0")[0]
        try:
            name = raw.decode("ascii")
        except UnicodeDecodeError:
            return True
        typ = ctypes.c_int.from_address(base).value
        ne = [ctypes.c_int64.from_address(base + 16 + 8 * i).value for i in range(4)]
        nb = [ctypes.c_size_t.from_address(base + 48 + 8 * i).value for i in range(4)]
        data = ctypes.c_void_p.from_address(base + 248).value
        if typ != 0 or not data or any(x <= 0 or x > 1 << 24 for x in ne):
            return True
        if nb[0] == 4 and nb[1] == 4 * ne[0] and nb[2] == nb[1] * ne[1] and nb[3] == nb[2] * ne[2]:
            n = ne[0] * ne[1] * ne[2] * ne[3]
            a = np.ctypeslib.as_array((ctypes.c_float * n).from_address(data)).copy()
            caps[name] = a.reshape(ne[3], ne[2], ne[1], ne[0])  # last write of a name wins
        return True

    lc.llama_backend_init()
    model = lc.llama_model_load_from_file(model_path.encode(), lc.llama_model_default_params())
    cp = lc.llama_context_default_params()
    cp.n_ctx = 512
    cp.n_batch = cp.n_ubatch = 512
    cp.n_threads = cp.n_threads_batch = n_threads
    cp.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_DISABLED  # same as make_fixtures.py
    cp.cb_eval = cb
    ctx = lc.llama_init_from_model(model, cp)
    arr = (lc.llama_token * len(ids))(*ids)
    rc = lc.llama_decode(ctx, lc.llama_batch_get_one(arr, len(ids)))
    if rc != 0:
        raise RuntimeError(f"llama_decode rc={rc}")
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    if "result_output" not in caps:
        raise RuntimeError("no tensors captured: ggml_tensor layout differs from this script's offsets")
    return caps


def f16(a):
    return np.asarray(a).astype(np.float16).astype(np.float64)


class Emulator:
    """ggml CPU matmul semantics: activations quantized to Q8_1 / Q8_0 blocks of 32."""

    def __init__(self, m: RefModel, model_path: str):
        from gguf import GGUFReader
        self.m = m
        r = GGUFReader(model_path)
        self.t = {x.name: x for x in r.tensors}

    def q4_1_min(self, name):
        b = self.t[name].data
        b = b.reshape(b.shape[0], -1, 20)
        return b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64)  # (out, nblocks)

    @staticmethod
    def q8(x):
        T, n = x.shape
        xb = x.reshape(T, n // 32, 32).astype(np.float32)
        d = np.abs(xb).max(-1, keepdims=True) / np.float32(127)
        q = np.where(d > 0, np.round(xb / np.where(d > 0, d, 1)), 0).astype(np.float64)
        return q, f16(d), f16(d[..., 0] * q.sum(-1))

    def matmul(self, x, W, name):
        tt = self.t[name].tensor_type.name
        q, d, s = self.q8(x)
        xa = (q * d).reshape(x.shape)
        y = xa @ W.T
        if tt == "Q4_1":  # m * s term uses the f16-rounded block sum s of Q8_1
            y += (s - d[..., 0] * q.sum(-1)) @ self.q4_1_min(name).T
        elif tt not in ("Q8_0", "Q4_0"):
            raise NotImplementedError(tt)
        return y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--ids", default=None)
    ap.add_argument("--layers", default="0,1,5,15,29")
    args = ap.parse_args()
    if args.ids:
        ids = [int(s) for s in args.ids.split(",")]
    else:
        fx = json.load(open(os.path.join(HERE, "..", "fixtures", "smollm2_ref.json")))
        p = fx["prompts"][2]
        ids = (p["prompt_ids"] + p["greedy_ref"])[:60]
    m = RefModel(args.model)
    em = Emulator(m, args.model)
    c = capture(args.model, ids)
    T = len(ids)
    pos = np.arange(T)
    H, Hkv, D = m.n_head, m.n_head_kv, m.head_dim
    g = lambda n, *shape: c[n].astype(np.float64).reshape(*shape)  # noqa: E731

    def rel(a, b):
        # the last layer only computes the output rows (inp_out_ids): compare the trailing rows
        n = min(a.shape[0], b.shape[0])
        a, b = a[a.shape[0] - n:], b[b.shape[0] - n:]
        return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))

    mask = np.where(pos[None, :] <= pos[:, None], 0.0, -np.inf)

    def neox(x):
        ang = pos[:, None] * m.inv_freq[None, :]
        cc, ss = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., : D // 2], x[..., D // 2:]
        return np.concatenate([a * cc - b * ss, a * ss + b * cc], -1)

    def attention(Q, K, V, half):
        f = f16 if half else (lambda z: z)
        kh, vh = np.repeat(f(K), m.gqa, 1), np.repeat(f(V), m.gqa, 1)
        s = np.einsum("thd,jhd->htj", f(Q), kh) / np.sqrt(D) + mask[None]
        s -= s.max(-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(-1, keepdims=True)
        return np.einsum("htj,jhd->thd", f(p), vh).reshape(T, H * D)

    print(f"{T} tokens; relative L2 error vs llama.cpp's output of the same op, given llama.cpp's input")
    print("op                exact-f64   q8-emulated")
    for il in [int(s) for s in args.layers.split(",")]:
        L = m.layers[il]
        pre = f"blk.{il}."
        xb = g(f"attn_norm-{il}", T, m.n_embd)
        x_in = g(f"ffn_inp-{il}", -1, m.n_embd)
        print(f"L{il:<2d} ffn_norm      {rel(m.rmsnorm(x_in, L['ffn_norm']), g(f'ffn_norm-{il}', -1, m.n_embd)):.2e}")
        q = em.matmul(xb, L["wq"], pre + "attn_q.weight").reshape(T, H, D)
        k = em.matmul(xb, L["wk"], pre + "attn_k.weight").reshape(T, Hkv, D)
        Q, K, V = g(f"Qcur-{il}", T, H, D), g(f"Kcur-{il}", T, Hkv, D), g(f"Vcur-{il}", T, Hkv, D)
        print(f"L{il:<2d} V matmul      {rel((xb @ L['wv'].T).reshape(T, Hkv, D), V):.2e}    "
              f"{rel(em.matmul(xb, L['wv'], pre + 'attn_v.weight').reshape(T, Hkv, D), V):.2e}")
        print(f"L{il:<2d} Q rope(adj)   {rel(m.rope(q, pos), Q):.2e}  (neox {rel(neox(q), Q):.2e}, none {rel(q, Q):.2e})")
        print(f"L{il:<2d} K rope(adj)   {rel(m.rope(k, pos), K):.2e}")
        ko = g(f"kqv_out-{il}", T, H * D)
        print(f"L{il:<2d} attention     {rel(attention(Q, K, V, False), ko):.2e}    {rel(attention(Q, K, V, True), ko):.2e} (f16 K/V/Q/P)")
        for inp, key, outn, wn in [("kqv_out", "wo", "attn_out", "attn_output"),
                                   ("ffn_norm", "wgate", "ffn_gate", "ffn_gate"),
                                   ("ffn_norm", "wup", "ffn_up", "ffn_up"),
                                   ("ffn_swiglu", "wdown", "ffn_out", "ffn_down")]:
            x = g(f"{inp}-{il}", -1, c[f"{inp}-{il}"].shape[-1])
            b = g(f"{outn}-{il}", -1, c[f"{outn}-{il}"].shape[-1])
            print(f"L{il:<2d} {outn:12s}  {rel(x @ L[key].T, b):.2e}    {rel(em.matmul(x, L[key], pre + wn + '.weight'), b):.2e}")
        sw = m.silu(g(f"ffn_gate-{il}", -1, m.n_ff)) * g(f"ffn_up-{il}", -1, m.n_ff)
        print(f"L{il:<2d} swiglu        {rel(sw, g(f'ffn_swiglu-{il}', -1, m.n_ff)):.2e}")
    h = g("result_norm", -1, m.n_embd)
    out = g("result_output", -1, m.n_vocab)
    print(f"head          {rel(h @ m.output.T, out):.2e}    {rel(em.matmul(h, m.output, 'token_embd.weight'), out):.2e}")
    # end to end
    L_ref = m.forward(ids)[-out.shape[0]:]
    print(f"end-to-end logits: max|d| {np.abs(L_ref - out).max():.3f}, rms {np.sqrt(((L_ref - out) ** 2).mean()):.3f}, "
          f"top1 agree {(L_ref.argmax(1) == out.argmax(1)).sum()}/{out.shape[0]}")


if __name__ == "__main__":
    main()
