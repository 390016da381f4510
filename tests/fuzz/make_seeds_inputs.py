#!/usr/bin/env python3
"""Seed corpora for the non-GGUF fuzz targets: python3 tests/fuzz/make_seeds_inputs.py ROOT

ROOT/config: the repository's experiment configs and a few hand-made ones (every key type, an SPS table);
ROOT/dataset: small .jsonl/.json prompt files of each shape the loaders accept (made here, not
copied from the shared datasets); ROOT/safetensors: config.json + NUL + a tiny safetensors image
(Llama and Qwen3 shapes)."""
import glob
import json
import os
import struct
import sys

root = sys.argv[1]
for sub in ("config", "dataset", "safetensors"):
    os.makedirs(os.path.join(root, sub), exist_ok=True)

def put(sub, name, data):
    with open(os.path.join(root, sub, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

for i, p in enumerate(sorted(glob.glob("experiments/**/*.json", recursive=True))):
    with open(p, "rb") as f:
        put("config", "exp%03d.json" % i, f.read())
put("config", "run.json", json.dumps({"drafter": {"name": "dspark-markov", "checkpoint": "x"}, "scheduler":
    {"name": "threshold", "threshold": 0.4}, "datasets": ["gsm8k", "humaneval"], "gamma": 7, "temperature": 1.0,
    "top_p": 0.9, "top_k": 20, "seed": 3, "limit": 5, "skip_bad_lines": True, "out": "o.h5"}))
put("config", "train.json", json.dumps({"drafter": {"name": "dspark-rnn", "layers": 2, "rank": 64, "taps": [1, 5, 9],
    "gamma": 7, "lambda": 7, "calibration": [1.0, 1.2]}, "out": "run", "data": {"dataset": "trainmix", "limit": 10,
    "temperature": 0.2, "top_p": 0.9, "max_new_tokens": 64, "seed": 1, "rebuild": False},
    "train": {"steps": 10, "lr": 6e-4, "warm_start": True, "seed": 2}}))
put("config", "sps.json", json.dumps({"sps": {"B": [1, 2, 4, 8, 16], "seconds": [0.05, 0.051, 0.057, 0.076, 0.127]}}))

put("dataset", "a.jsonl", '{"question": "What is 2+2?"}\n{"prompt": "Write code"}\n{"turns": ["hi", "and then?"]}\n')
put("dataset", "b.jsonl", '{"instruction": "x", "input": "y"}\n\n{"text": "z"}\n{"bad": \n')
put("dataset", "c.json", json.dumps([{"problem": "p1"}, {"content": "c"}, 3, {"conversations": [{"value": "v"}]}]))

def safetensors(tensors):
    header, data = {}, b""
    for name, shape, vals in tensors:
        raw = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data

def tiny(arch, qwen):
    d, hid, v, nh, hd = 8, 16, 12, 2, 4
    cfg = {"architectures": [arch], "hidden_size": d, "intermediate_size": hid, "num_attention_heads": nh,
           "num_key_value_heads": 1, "num_hidden_layers": 1, "vocab_size": v, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": True, "max_position_embeddings": 64}
    if qwen:
        cfg["head_dim"] = hd
    ts = [("model.embed_tokens.weight", [v, d], [0.01 * i for i in range(v * d)]),
          ("model.norm.weight", [d], [1.0] * d),
          ("model.layers.0.input_layernorm.weight", [d], [1.0] * d),
          ("model.layers.0.post_attention_layernorm.weight", [d], [1.0] * d),
          ("model.layers.0.self_attn.q_proj.weight", [nh * hd, d], [0.02] * (nh * hd * d)),
          ("model.layers.0.self_attn.k_proj.weight", [hd, d], [0.02] * (hd * d)),
          ("model.layers.0.self_attn.v_proj.weight", [hd, d], [0.02] * (hd * d)),
          ("model.layers.0.self_attn.o_proj.weight", [d, nh * hd], [0.02] * (nh * hd * d)),
          ("model.layers.0.mlp.gate_proj.weight", [hid, d], [0.02] * (hid * d)),
          ("model.layers.0.mlp.up_proj.weight", [hid, d], [0.02] * (hid * d)),
          ("model.layers.0.mlp.down_proj.weight", [d, hid], [0.02] * (hid * d))]
    if qwen:
        ts += [("model.layers.0.self_attn.q_norm.weight", [hd], [1.0] * hd),
               ("model.layers.0.self_attn.k_norm.weight", [hd], [1.0] * hd)]
    return json.dumps(cfg).encode() + b"\0" + safetensors(ts)

put("safetensors", "llama.bin", tiny("LlamaForCausalLM", False))
put("safetensors", "qwen3.bin", tiny("Qwen3ForCausalLM", True))
