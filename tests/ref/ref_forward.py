#!/usr/bin/env python3
"""Independent numpy reference forward pass for GGUF Llama- and Qwen2-architecture models.

This file is deliberately independent of the C code base: tensors are read with
gguf-py's GGUFReader, dequantized with gguf.quants.dequantize (the Python port of
ggml's reference dequantizers), and the whole forward pass is computed in float64.

Conventions (GGUF / llama.cpp Llama layout):
  * A weight with ggml ne=[in, out] is an numpy array of shape (out, in) after
    dequantization, so y = W @ x (here batched: Y = X @ W.T).
  * Q/K rows were permuted by the HF->GGUF converter to the Meta layout, so RoPE
    rotates ADJACENT pairs (2i, 2i+1) of each head, angle = pos * base^(-2i/n_rot).
  * Grouped-query attention: query head h uses kv head h // (n_head / n_head_kv).
  * Tied embeddings: when output.weight is absent, token_embd.weight is the LM head.
  * qwen2: Q/K/V projections carry biases (blk.N.attn_{q,k,v}.bias), added before RoPE; RoPE
    rotates HALVES (i, i + n_rot/2) (llama.cpp's NEOX mode for this architecture).
  * store="float32" keeps the dequantized weights in float32 (a 1.5B model in 7 GB instead of 14);
    every product is still computed in float64 (numpy upcasts the weights at each matmul).

All hyperparameters come from the GGUF metadata ({arch}.block_count, ...).

CLI (manual use):
  ~/.cache/dspark-bench/venv/bin/python tests/ref/ref_forward.py \
      --model ~/.cache/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf --ids 1,2,3
prints the top-5 next-token logits at the last position (and, with --gen N,
greedily generates N more tokens).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _field(reader: GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class RefModel:
    """float64 reference Llama model loaded from a GGUF file."""

    def __init__(self, path: str, dtype=np.float64, store=None):
        self.path = path
        self.dtype = dtype
        r = GGUFReader(path)
        arch = _field(r, "general.architecture")
        if arch not in ("llama", "qwen2"):
            raise ValueError(f"unsupported architecture {arch!r} (llama, qwen2)")
        self.neox = arch == "qwen2"
        store = store or dtype
        self.arch = arch
        g = lambda k, d=None: _field(r, f"{arch}.{k}", d)  # noqa: E731
        self.n_layer = int(g("block_count"))
        self.n_embd = int(g("embedding_length"))
        self.n_ff = int(g("feed_forward_length"))
        self.n_head = int(g("attention.head_count"))
        self.n_head_kv = int(g("attention.head_count_kv", self.n_head))
        self.head_dim = self.n_embd // self.n_head
        self.n_rot = int(g("rope.dimension_count", self.head_dim))
        self.rope_base = float(g("rope.freq_base", 10000.0))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        scaling = g("rope.scaling.type", "none")
        if scaling not in (None, "none"):
            raise ValueError(f"rope scaling {scaling!r} not supported by the reference")
        if self.n_head % self.n_head_kv:
            raise ValueError("n_head must be a multiple of n_head_kv")
        self.gqa = self.n_head // self.n_head_kv

        tensors = {t.name: t for t in r.tensors}

        def W(name: str) -> np.ndarray:
            t = tensors[name]
            a = dequantize(t.data, t.tensor_type)
            # ggml ne = [ne0, ne1, ...] -> numpy shape reversed
            shape = tuple(int(x) for x in reversed(t.shape))
            return np.ascontiguousarray(a.reshape(shape), dtype=store)

        self.tok_embd = W("token_embd.weight")  # (vocab, n_embd)
        self.n_vocab = self.tok_embd.shape[0]
        self.output = W("output.weight") if "output.weight" in tensors else self.tok_embd
        self.tied = "output.weight" not in tensors
        self.output_norm = W("output_norm.weight")
        self.layers = []
        for il in range(self.n_layer):
            p = f"blk.{il}."
            L = {
                "attn_norm": W(p + "attn_norm.weight"),
                "wq": W(p + "attn_q.weight"),
                "wk": W(p + "attn_k.weight"),
                "wv": W(p + "attn_v.weight"),
                "wo": W(p + "attn_output.weight"),
                "ffn_norm": W(p + "ffn_norm.weight"),
                "wgate": W(p + "ffn_gate.weight"),
                "wup": W(p + "ffn_up.weight"),
                "wdown": W(p + "ffn_down.weight"),
            }
            if arch == "qwen2":
                for b in ("q", "k", "v"):
                    L["b" + b] = W(p + f"attn_{b}.bias").astype(np.float64)
            assert L["wq"].shape == (self.n_head * self.head_dim, self.n_embd)
            assert L["wk"].shape == (self.n_head_kv * self.head_dim, self.n_embd)
            assert L["wdown"].shape == (self.n_embd, self.n_ff)
            self.layers.append(L)
        # RoPE inverse frequencies: theta_i = base^(-2i/n_rot), i = 0..n_rot/2-1
        self.inv_freq = self.rope_base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot)

    # ------------------------------------------------------------------ ops
    def rmsnorm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """x: (T, H, head_dim); rotate adjacent pairs (2i, 2i+1) of the first n_rot dims."""
        ang = pos[:, None].astype(np.float64) * self.inv_freq[None, :]  # (T, n_rot/2)
        c = np.cos(ang)[:, None, :]
        s = np.sin(ang)[:, None, :]
        out = x.copy()
        if self.neox:  # pairs (i, i + n_rot/2)
            h = self.n_rot // 2
            x0, x1 = x[..., 0:h], x[..., h:self.n_rot]
            out[..., 0:h] = x0 * c - x1 * s
            out[..., h:self.n_rot] = x0 * s + x1 * c
            return out
        x0 = x[..., 0:self.n_rot:2]
        x1 = x[..., 1:self.n_rot:2]
        out[..., 0:self.n_rot:2] = x0 * c - x1 * s
        out[..., 1:self.n_rot:2] = x0 * s + x1 * c
        return out

    @staticmethod
    def silu(x: np.ndarray) -> np.ndarray:
        return x / (1.0 + np.exp(-x))

    # -------------------------------------------------------------- forward
    def new_cache(self):
        return {"n": 0, "k": [None] * self.n_layer, "v": [None] * self.n_layer}

    def forward(self, ids, cache=None, last_only: bool = False) -> np.ndarray:
        """Run tokens `ids` (appended after whatever is in `cache`, if given).

        Returns logits of shape (T, n_vocab) (or (1, n_vocab) with last_only).
        Attention is causal: the query at absolute position p sees keys 0..p.
        """
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        n_past = cache["n"] if cache is not None else 0
        pos = np.arange(n_past, n_past + T)
        H, Hkv, D = self.n_head, self.n_head_kv, self.head_dim
        scale = 1.0 / np.sqrt(D)
        # causal mask over (query t, key j) with keys at positions 0..n_past+T-1
        kpos = np.arange(n_past + T)
        mask = np.where(kpos[None, :] <= pos[:, None], 0.0, -np.inf)  # (T, n_kv)

        x = self.tok_embd[ids].astype(np.float64)  # (T, n_embd)
        for il, L in enumerate(self.layers):
            xb = self.rmsnorm(x, L["attn_norm"])
            q, k, v = xb @ L["wq"].T, xb @ L["wk"].T, xb @ L["wv"].T
            if "bq" in L:
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q, k, v = q.reshape(T, H, D), k.reshape(T, Hkv, D), v.reshape(T, Hkv, D)
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            if cache is not None:
                if cache["k"][il] is not None:
                    k = np.concatenate([cache["k"][il], k], axis=0)
                    v = np.concatenate([cache["v"][il], v], axis=0)
                cache["k"][il] = k
                cache["v"][il] = v
            # GQA: query head h -> kv head h // gqa
            kh = np.repeat(k, self.gqa, axis=1)  # (n_kv, H, D)
            vh = np.repeat(v, self.gqa, axis=1)
            s = np.einsum("thd,jhd->htj", q, kh) * scale + mask[None]  # (H, T, n_kv)
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            att = np.einsum("htj,jhd->thd", p, vh).reshape(T, H * D)
            x = x + att @ L["wo"].T
            xb = self.rmsnorm(x, L["ffn_norm"])
            hg = xb @ L["wgate"].T
            hu = xb @ L["wup"].T
            x = x + (self.silu(hg) * hu) @ L["wdown"].T
        if cache is not None:
            cache["n"] = n_past + T
        if last_only:
            x = x[-1:]
        h = self.rmsnorm(x, self.output_norm)
        return h @ self.output.T

    def generate_greedy(self, prompt_ids, n: int, use_cache: bool = True):
        """n argmax tokens after prompt_ids; never stops at EOS."""
        out = []
        if use_cache:
            cache = self.new_cache()
            logits = self.forward(prompt_ids, cache, last_only=True)
            for _ in range(n):
                t = int(np.argmax(logits[-1]))
                out.append(t)
                if len(out) < n:
                    logits = self.forward([t], cache, last_only=True)
        else:
            seq = list(prompt_ids)
            for _ in range(n):
                t = int(np.argmax(self.forward(seq, last_only=True)[-1]))
                out.append(t)
                seq.append(t)
        return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--ids", required=True, help="comma-separated token ids, e.g. 1,2,3")
    ap.add_argument("--topk", type=int, default=5)
    ap.add_argument("--gen", type=int, default=0, help="also greedily generate N tokens")
    args = ap.parse_args(argv)
    ids = [int(s) for s in args.ids.split(",") if s.strip()]
    t0 = time.time()
    m = RefModel(args.model)
    t1 = time.time()
    logits = m.forward(ids, last_only=True)[-1]
    t2 = time.time()
    print(f"model: n_layer={m.n_layer} n_embd={m.n_embd} n_head={m.n_head} n_head_kv={m.n_head_kv} "
          f"n_ff={m.n_ff} n_vocab={m.n_vocab} rope_base={m.rope_base} eps={m.eps} tied={m.tied} "
          f"(load {t1 - t0:.1f}s, forward {t2 - t1:.2f}s)", file=sys.stderr)
    top = np.argsort(-logits, kind="stable")[: args.topk]
    for r, t in enumerate(top):
        print(f"{r}\t{int(t)}\t{logits[t]:.6f}")
    if args.gen:
        print("greedy:", ",".join(str(t) for t in m.generate_greedy(ids, args.gen)))


if __name__ == "__main__":
    main()
