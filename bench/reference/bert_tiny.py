#!/usr/bin/env python3
"""Reference values for engram's BERT encoder (issue #35): a tiny random BertModel checkpoint
and Hugging Face transformers' outputs on it, written to tests/data/bert-tiny/:

- config.json        Hugging Face BertConfig fields (hidden 32, 2 layers, 4 heads, FFN 64,
                     vocab 99, max_position 16, type_vocab 2, eps 1e-12, gelu)
- model.safetensors  a BertModel state dict in PyTorch layout (Linear weights [out, in]),
                     keys with the `bert.` prefix, plus the I64 embeddings.position_ids and the
                     pooler, which engram ignores
- tokenizer.json     an uncased WordPiece tokenizer over a fixed 77-token vocabulary (the
                     special tokens, a-z, ##a-##z, punctuation and a few words), BERT's pipeline
                     (BertNormalizer, BertPreTokenizer, [CLS] $A [SEP]), no truncation or
                     padding section: what `engram embed` reads beside the checkpoint
- reference.json     `samples`: for each padded id sequence, its ids, the last hidden state
                     [len, 32], and the cls and mean (over non-pad tokens) pooled vectors;
                     `embed`: texts tokenized with tokenizer.json at max_len 16 (truncated,
                     padded with [PAD] = 0) and their cls, mean and L2-normalised mean vectors,
                     which `engram embed` must reproduce

Every value is computed by transformers' own `BertModel` (float32, its default attention
implementation) with the versions recorded in reference.json; pooling is sentence-transformers'
(mean: sum(h * mask) / max(sum(mask), 1e-9); normalise: torch.nn.functional.normalize, p = 2).
A float64 numpy port of modeling_bert.py (BertEmbeddings, BertSelfAttention with the additive
mask (1 - m) * finfo(float32).min, erf GELU, post-norm LayerNorm) checks the same outputs, and
the script stops if the two differ by more than 1e-5.

Usage (torch and transformers are references only, never engram dependencies):
    python3 -m venv /tmp/venv-torch
    /tmp/venv-torch/bin/pip install torch==2.15.0 transformers==5.25.0 safetensors numpy
    /tmp/venv-torch/bin/python bench/reference/bert_tiny.py [OUT_DIR]
(the CPU wheel, `--index-url https://download.pytorch.org/whl/cpu`, serves as well).
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

# tokenizer.json's vocabulary, in id order ([PAD] = 0, [CLS] = 2, [SEP] = 3).
WORDS = ["the", "market", "rose", "shares", "bank", "film", "new", "and", "in", "of", "won"]
VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    + ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    + [".", ",", "!", "?", "'"]
    + WORDS
    + ["##ed", "##ing", "##er", "##ly"]
)

# What `engram embed` reads, one text per line: a short text, one with pieces and [UNK]s, an
# empty one ([CLS] [SEP]), accents (stripped by the uncased normaliser), one of more than 16
# ids (truncated).
EMBED_TEXTS = [
    "The market rose.",
    "Shares in the bank fell sharply; 3 films won!",
    "",
    "Café naïve",
    "the new film and the market and the bank rose in the market of the new bank again",
]
EMBED_MAX_LEN = 16


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


def numpy_forward(sd, cfg, ids):
    """modeling_bert.py's last_hidden_state in float64, ids [batch, len], token type 0, mask
    ids != pad: the independent check of transformers' output."""
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
    return x


# --- transformers: shared with minilm.py ------------------------------------------------------


def versions():
    """The versions of the reference's libraries, as reference.json records them."""
    import tokenizers
    import torch
    import transformers

    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "tokenizers": tokenizers.__version__,
    }


def load_model(model_dir):
    """transformers' BertModel from a Hugging Face directory, in eval mode (no dropout)."""
    from transformers import BertModel

    model = BertModel.from_pretrained(model_dir).eval()
    return model, model.config._attn_implementation


def hf_forward(model, ids, mask):
    """(last_hidden_state [b, n, d], mean [b, d], cls [b, d], normalised mean [b, d]) of
    transformers' BertModel, as float64 numpy arrays; pooling as sentence-transformers'."""
    import torch

    ids = torch.tensor(np.asarray(ids), dtype=torch.long)
    m = torch.tensor(np.asarray(mask), dtype=torch.long)
    with torch.no_grad():
        hidden = model(
            input_ids=ids, attention_mask=m, token_type_ids=torch.zeros_like(ids)
        ).last_hidden_state
        mf = m.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * mf).sum(1) / torch.clamp(mf.sum(1), min=1e-9)
        normalized = torch.nn.functional.normalize(mean, p=2, dim=1)
    f64 = lambda t: t.numpy().astype(np.float64)  # noqa: E731
    return f64(hidden), f64(mean), f64(hidden[:, 0, :]), f64(normalized)


def tokenize(tokenizer_path, texts, max_len):
    """Hugging Face `tokenizers`' ids and attention masks [len(texts), max_len]: truncated at
    max_len (special tokens included), padded on the right with the pad id, as engram does."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path)
    pad = tok.padding["pad_id"] if tok.padding else tok.token_to_id("[PAD]")
    tok.enable_truncation(max_length=max_len)
    tok.enable_padding(length=max_len, pad_id=pad, pad_token=tok.id_to_token(pad))
    enc = tok.encode_batch(texts)
    return [e.ids for e in enc], [e.attention_mask for e in enc]


def rows(a, digits=7):
    return np.round(np.asarray(a), digits).tolist()


# --- the tiny checkpoint ------------------------------------------------------------------------


def write_tokenizer(path):
    """tests/data/bert-tiny/tokenizer.json: BERT's uncased WordPiece pipeline over VOCAB."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(VOCAB)}
    assert len(vocab) == len(VOCAB) <= CONFIG["vocab_size"], len(VOCAB)
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=None)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(path)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "bert-tiny")
    os.makedirs(out, exist_ok=True)
    sd = random_weights(CONFIG, seed=0)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(CONFIG, fh, indent=2)
        fh.write("\n")
    tok_path = os.path.join(out, "tokenizer.json")
    write_tokenizer(tok_path)

    model, attn = load_model(out)
    mask = (np.asarray(IDS) != CONFIG["pad_token_id"]).astype(np.int64)
    hidden, mean, cls, _ = hf_forward(model, IDS, mask)
    check = numpy_forward(sd, CONFIG, IDS)
    numpy_diff = float(np.abs(check - hidden)[mask.astype(bool)].max())
    print(f"numpy port vs transformers BertModel: max abs {numpy_diff:.3e} (non-pad positions)")
    assert numpy_diff < 1e-5, numpy_diff

    ids, emask = tokenize(tok_path, EMBED_TEXTS, EMBED_MAX_LEN)
    _, e_mean, e_cls, e_norm = hf_forward(model, ids, emask)
    ref = {
        "source": "bench/reference/bert_tiny.py (transformers' BertModel)",
        "versions": versions(),
        "attn_implementation": attn,
        "numpy_port_max_abs": numpy_diff,
        "pad_id": 0,
        "samples": [
            {
                "ids": IDS[s],
                "last_hidden_state": rows(hidden[s]),
                "cls": rows(cls[s]),
                "mean": rows(mean[s]),
            }
            for s in range(len(IDS))
        ],
        "embed": {
            "max_len": EMBED_MAX_LEN,
            "texts": EMBED_TEXTS,
            "ids": ids,
            "cls": rows(e_cls),
            "mean": rows(e_mean),
            "mean_normalized": rows(e_norm),
        },
    }
    with open(os.path.join(out, "reference.json"), "w") as fh:
        json.dump(ref, fh)
        fh.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
