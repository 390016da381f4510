#!/usr/bin/env python3
"""Write small valid GGUF files as the fuzzer's seed corpus: python3 tests/fuzz/make_seeds.py DIR

Seeds cover every metadata value type, nested arrays, a custom alignment, tensors of the
decodable types (the real pair's Q5_0, Q4_K and Q6_K among them), and a byte-level BPE tokenizer
(256 byte tokens, a few merges, specials) with SmolLM2's and Qwen2's pre-tokenizers."""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)

def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b

def kv(key, t, payload):
    return s(key) + struct.pack("<I", t) + payload

def arr(et, items):
    return struct.pack("<IQ", et, len(items)) + b"".join(items)

def byte_token(b):
    keep = 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE
    extra = sum(1 for i in range(b) if not (0x21 <= i <= 0x7E or 0xA1 <= i <= 0xAC or i >= 0xAE))
    return chr(b if keep else 256 + extra)

def gguf(kvs, tensors, alignment=32):
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    info, data = b"", b""
    for name, typ, ne, raw in tensors:
        info += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        info += struct.pack("<IQ", typ, len(data))
        data += raw + b"\0" * ((-len(raw)) % alignment)
    out = head + info
    out += b"\0" * ((-len(out)) % alignment)
    return out + data

def f16(x):
    return struct.pack("<e", x)

def main(d):
    os.makedirs(d, exist_ok=True)
    scalars = [
        kv("a.u8", U8, b"\x07"), kv("a.i8", I8, b"\xf9"), kv("a.u16", U16, struct.pack("<H", 9)),
        kv("a.i16", I16, struct.pack("<h", -9)), kv("a.u32", U32, struct.pack("<I", 5)),
        kv("a.i32", I32, struct.pack("<i", -5)), kv("a.f32", F32, struct.pack("<f", 0.5)),
        kv("a.bool", BOOL, b"\x01"), kv("a.str", STR, s("text")), kv("a.u64", U64, struct.pack("<Q", 1)),
        kv("a.i64", I64, struct.pack("<q", -1)), kv("a.f64", F64, struct.pack("<d", 0.25)),
        kv("a.arr", ARR, arr(I32, [struct.pack("<i", i) for i in range(4)])),
        kv("a.nested", ARR, arr(ARR, [arr(U8, [b"\x01", b"\x02"]), arr(STR, [s("x")])])),
    ]
    q41 = f16(0.1) + f16(-0.5) + bytes(range(16))
    q80 = f16(0.05) + bytes(range(32))
    # the real pair's block types: Q5_0 (d, 4 bytes of fifth bits, 16 of nibbles), Q4_K (d, dmin, 12 bytes
    # of packed 6-bit scales and mins, 128 of nibbles), Q6_K (128 low nibble bytes, 64 of high bits, 16
    # int8 scales, d)
    q50 = f16(0.25) + bytes([0x5a, 0xc3, 0x0f, 0xf0]) + bytes(range(16))
    q4k = f16(0.01) + f16(0.02) + bytes((7 * i + 3) % 256 for i in range(12)) + bytes((i * 37) % 256 for i in range(128))
    q6k = bytes((i * 11) % 256 for i in range(128)) + bytes((i * 5) % 256 for i in range(64)) + \
        bytes((i * 9 - 60) % 256 for i in range(16)) + f16(0.003)
    tensors = [("t.f32", 0, [4, 2], struct.pack("<8f", *range(8))), ("t.q41", 3, [32], q41),
               ("t.q80", 8, [32, 1], q80), ("t.f16", 1, [2], f16(1.0) + f16(-2.0)),
               ("t.q50", 6, [32], q50), ("t.q4k", 12, [256], q4k), ("t.q6k", 14, [256], q6k)]
    open(os.path.join(d, "seed_types.gguf"), "wb").write(gguf(scalars, tensors))
    open(os.path.join(d, "seed_align64.gguf"), "wb").write(
        gguf([kv("general.alignment", U32, struct.pack("<I", 64))] + scalars[:3], tensors, 64))
    toks = [byte_token(b) for b in range(256)] + ["ab", "Ġw", "<|im_start|>", "<|im_end|>"]
    types = [1] * 258 + [3, 3]
    merges = ["a b", "Ġ w"]
    tok_kvs = [
        kv("tokenizer.ggml.model", STR, s("gpt2")), kv("tokenizer.ggml.pre", STR, s("smollm")),
        kv("tokenizer.ggml.tokens", ARR, arr(STR, [s(t) for t in toks])),
        kv("tokenizer.ggml.token_type", ARR, arr(I32, [struct.pack("<i", t) for t in types])),
        kv("tokenizer.ggml.merges", ARR, arr(STR, [s(m) for m in merges])),
        kv("tokenizer.ggml.eos_token_id", U32, struct.pack("<I", 259)),
    ]
    open(os.path.join(d, "seed_tokenizer.gguf"), "wb").write(gguf(tok_kvs, tensors[:1]))
    # Qwen2's pre-tokenizer (the real pair's) with its end-of-turn token
    qwen_kvs = [kv("tokenizer.ggml.pre", STR, s("qwen2")) if k.startswith(s("tokenizer.ggml.pre")) else k
                for k in tok_kvs]
    open(os.path.join(d, "seed_tokenizer_qwen2.gguf"), "wb").write(gguf(qwen_kvs, tensors[:1]))

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/seeds")
