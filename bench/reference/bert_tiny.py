#!/usr/bin/env python3
"""Reference values for engram's BERT encoder (issue #35): a tiny random BertModel checkpoint
and its outputs on padded id sequences, written to tests/data/bert-tiny/:

- config.json        Hugging Face BertConfig fields (hidden 32, 2 layers, 4 heads, FFN 64,
                     vocab 99, max_position 16, type_vocab 2, eps 1e-12, gelu)
- model.safetensors  a BertModel state dict in PyTorch layout (Linear weights [out, in]),
                     keys with the `bert.` prefix, plus the I64 embeddings.position_ids and the
                     pooler, which engram ignores
- reference.json     for each id sequence: ids, the last hidden state [len, 32], and the cls
                     and mean (over non-pad tokens) pooled vectors

The forward is Hugging Face transformers' BertModel (modeling_bert.py: BertEmbeddings,
BertSelfAttention with the additive mask (1 - m) * finfo(float32).min, BertSelfOutput,
BertIntermediate with erf GELU, BertOutput; post-norm LayerNorm) written in numpy, computed in
float64 from the float32 weights. When torch and transformers import, the script also runs
transformers' BertModel on the same checkpoint and asserts the two agree within 1e-5.

Usage: python3 bench/reference/bert_tiny.py [OUT_DIR]   (needs numpy and safetensors)
"""

import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import save_file

CONFIG = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "vocab_size": 99,
    "max_position_embeddings": 16,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
    "pad_token_id": 0,
}

# Three sequences of max_len 10: [CLS]=2 ... [SEP]=3, padded with 0.
IDS = [
    [2, 45, 17, 88, 5, 3, 0, 0, 0, 0],
    [2, 9, 98, 33, 61, 72, 14, 27, 50, 3],
    [2, 77, 3, 0, 0, 0, 0, 0, 0, 0],
]


def random_weights(cfg, seed=0):
    """A BertModel state dict (PyTorch layout, `bert.` prefix), N(0, 0.5) weights so that the
    layers do more than pass the embeddings through, norms around 1."""
    rng = np.random.default_rng(seed)
    d, f = cfg["hidden_size"], cfg["intermediate_size"]

    def w(*shape, std=0.5):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ln(prefix):
        return {
            prefix + ".weight": (1.0 + w(d, std=0.1)).astype(np.float32),
            prefix + ".bias": w(d, std=0.1),
        }

    sd = {
        "bert.embeddings.word_embeddings.weight": w(cfg["vocab_size"], d),
        "bert.embeddings.position_embeddings.weight": w(cfg["max_position_embeddings"], d),
        "bert.embeddings.token_type_embeddings.weight": w(cfg["type_vocab_size"], d),
        "bert.embeddings.position_ids": np.arange(
            cfg["max_position_embeddings"], dtype=np.int64
        ).reshape(1, -1),
    }
    sd.update(ln("bert.embeddings.LayerNorm"))
    scale = 1.0 / math.sqrt(d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."
        for name in ("query", "key", "value"):
            sd[p + f"attention.self.{name}.weight"] = w(d, d, std=scale * 2)
            sd[p + f"attention.self.{name}.bias"] = w(d, std=0.1)
        sd[p + "attention.output.dense.weight"] = w(d, d, std=scale)
        sd[p + "attention.output.dense.bias"] = w(d, std=0.1)
        sd.update(ln(p + "attention.output.LayerNorm"))
        sd[p + "intermediate.dense.weight"] = w(f, d, std=scale)
        sd[p + "intermediate.dense.bias"] = w(f, std=0.1)
        sd[p + "output.dense.weight"] = w(d, f, std=1.0 / math.sqrt(f))
        sd[p + "output.dense.bias"] = w(d, std=0.1)
        sd.update(ln(p + "output.LayerNorm"))
    sd["bert.pooler.dense.weight"] = w(d, d, std=scale)
    sd["bert.pooler.dense.bias"] = w(d, std=0.1)
    return sd


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


ERF = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + ERF(x / math.sqrt(2.0)))


def linear(x, sd, name):
    # PyTorch Linear: y = x W^T + b, W [out, in]
    return x @ sd[name + ".weight"].astype(np.float64).T + sd[name + ".bias"]


def bert_forward(sd, cfg, ids):
    """HF BertModel's last_hidden_state for ids [batch, len], token_type 0, mask ids != 0."""
    ids = np.asarray(ids)
    b, n = ids.shape
    d, h = cfg["hidden_size"], cfg["num_attention_heads"]
    dh = d // h
    eps = cfg["layer_norm_eps"]
    g = lambda k: sd["bert." + k].astype(np.float64)  # noqa: E731
    x = (
        g("embeddings.word_embeddings.weight")[ids]
        + g("embeddings.position_embeddings.weight")[np.arange(n)][None]
        + g("embeddings.token_type_embeddings.weight")[0][None, None]
    )
    x = layer_norm(x, g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"), eps)
    mask = (ids != cfg["pad_token_id"]).astype(np.float64)
    additive = (1.0 - mask)[:, None, None, :] * np.finfo(np.float32).min
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."
        split = lambda t: t.reshape(b, n, h, dh).transpose(0, 2, 1, 3)  # noqa: E731
        q = split(linear(x, sd, p + "attention.self.query"))
        k = split(linear(x, sd, p + "attention.self.key"))
        v = split(linear(x, sd, p + "attention.self.value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh) + additive
        s = s - s.max(-1, keepdims=True)
        pr = np.exp(s)
        pr = pr / pr.sum(-1, keepdims=True)
        ctx = (pr @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
        a = linear(ctx, sd, p + "attention.output.dense")
        x = layer_norm(
            a + x,
            g(f"encoder.layer.{i}.attention.output.LayerNorm.weight"),
            g(f"encoder.layer.{i}.attention.output.LayerNorm.bias"),
            eps,
        )
        f = linear(gelu(linear(x, sd, p + "intermediate.dense")), sd, p + "output.dense")
        x = layer_norm(
            f + x,
            g(f"encoder.layer.{i}.output.LayerNorm.weight"),
            g(f"encoder.layer.{i}.output.LayerNorm.bias"),
            eps,
        )
    return x, mask


def check_with_transformers(out_dir, hidden):
    """transformers' own BertModel on the saved checkpoint, when torch imports."""
    try:
        import torch
        from transformers import BertModel
    except Exception as e:  # noqa: BLE001
        print(f"transformers not importable here ({type(e).__name__}); numpy reference only")
        return None
    model = BertModel.from_pretrained(out_dir).eval()
    ids = torch.tensor(IDS)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=(ids != 0).long()).last_hidden_state
    diff = float(np.abs(out.numpy().astype(np.float64) - hidden).max())
    print(f"numpy vs transformers BertModel: max abs {diff:.3e}")
    assert diff < 1e-5, diff
    return diff


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "bert-tiny")
    os.makedirs(out, exist_ok=True)
    sd = random_weights(CONFIG, seed=0)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(CONFIG, fh, indent=2)
        fh.write("\n")
    hidden, mask = bert_forward(sd, CONFIG, IDS)
    tf_diff = check_with_transformers(out, hidden)
    cls = hidden[:, 0, :]
    mean = (hidden * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
    ref = {
        "source": "bench/reference/bert_tiny.py (numpy port of transformers' BertModel)",
        "transformers_max_abs": tf_diff,
        "pad_id": 0,
        "samples": [
            {
                "ids": IDS[s],
                "last_hidden_state": np.round(hidden[s], 7).tolist(),
                "cls": np.round(cls[s], 7).tolist(),
                "mean": np.round(mean[s], 7).tolist(),
            }
            for s in range(len(IDS))
        ],
    }
    with open(os.path.join(out, "reference.json"), "w") as fh:
        json.dump(ref, fh)
        fh.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
