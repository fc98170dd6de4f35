#!/usr/bin/env python3
"""Reference token ids for engram's tokenizer test (tests/data/tokenizer-tiny/).

Trains a tiny uncased WordPiece tokenizer with BERT's pipeline (BertNormalizer with lowercase,
BertPreTokenizer, the [CLS] ... [SEP] template, [PAD] = 0) on a few sentences, writes it as
tokenizer.json, then encodes test texts with Hugging Face's own `tokenizers`, truncated at
MAX_LEN and padded with [PAD], and writes reference.json: {"max_len", "pad_id", "texts",
"ids"} (ids [len(texts), MAX_LEN]). engram's test (core/src/data/tokenizer.rs) asserts that its
ids equal these exactly.

`--train` trains the tokenizer anew (not reproducible id for id); without it the committed
tokenizer.json is kept and only reference.json is rewritten.

Run (tokenizers is a reference only, never an engram dependency):
    python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install tokenizers
    /tmp/venv-tok/bin/python bench/reference/tokenizer_ids.py

With `--tokenizer PATH --out FILE [--max-len N]` it trains nothing and writes the reference of
a given tokenizer.json (MiniLM's, say) instead, with "tokenizer": PATH in it; engram's test
checks it when ENGRAM_TOKENIZER_REFERENCE=FILE is set:
    ENGRAM_TOKENIZER_REFERENCE=FILE cargo test --release -p engram-core tokenizer
"""

import argparse
import json
import os

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

MAX_LEN = 12
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tokenizer-tiny")

CORPUS = [
    "The market rose sharply as investors bought shares in technology firms.",
    "The film won three awards at the festival, and its actors were praised.",
    "Parliament voted on the new budget after a long debate.",
    "The striker scored twice and the team won the league title.",
    "A new phone was released with a faster chip and a better camera.",
    "Shares fell when the bank reported lower profits.",
    "Free money!!! Click here to claim your prize now.",
    "Meeting moved to Tuesday; please bring the quarterly report.",
]

TEXTS = [
    "The market rose.",
    "Investors bought SHARES in technology firms, and the bank reported profits!",
    "Café naïve résumé",  # accents are stripped by BERT's uncased normaliser
    "unknownword xyzzy",  # pieces and [UNK]
    "",  # an empty text: [CLS] [SEP] then padding
    "Parliament voted; the striker scored twice.",
    "   spaces\tand\nnewlines   ",
    "中文 text",  # CJK characters are split one by one
]


def reference(path, max_len):
    """{max_len, pad_id, texts, ids} of `path` with Hugging Face's truncation and padding."""
    ref = Tokenizer.from_file(path)
    pad = ref.padding["pad_id"] if ref.padding else ref.token_to_id("[PAD]")
    pad_token = ref.id_to_token(pad)
    ref.enable_truncation(max_length=max_len)
    ref.enable_padding(pad_id=pad, pad_token=pad_token, length=max_len)
    ids = [e.ids for e in ref.encode_batch(TEXTS)]
    assert all(len(row) == max_len for row in ids)
    return {"max_len": max_len, "pad_id": pad, "texts": TEXTS, "ids": ids}


def write(ref, out):
    with open(out, "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", help="a tokenizer.json to take instead of training one")
    ap.add_argument("--out", help="where its reference goes (with --tokenizer)")
    ap.add_argument("--max-len", type=int, default=MAX_LEN)
    ap.add_argument(
        "--train",
        action="store_true",
        help="train the tiny tokenizer anew (its ids differ from run to run: the WordPiece "
        "trainer breaks ties in hash order), else only rewrite reference.json from the committed one",
    )
    args = ap.parse_args()
    if args.tokenizer:
        ref = reference(args.tokenizer, args.max_len)
        ref["tokenizer"] = os.path.abspath(args.tokenizer)
        write(ref, args.out)
        return
    if not args.train:
        path = os.path.join(OUT, "tokenizer.json")
        write(reference(path, MAX_LEN), os.path.join(OUT, "reference.json"))
        return
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(
        vocab_size=200,
        min_frequency=1,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    # As MiniLM's file: truncation and padding fixed in the file (at 128), which engram overrides.
    tok.enable_truncation(max_length=128)
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=128)
    os.makedirs(OUT, exist_ok=True)
    tok.save(os.path.join(OUT, "tokenizer.json"), pretty=True)

    write(reference(os.path.join(OUT, "tokenizer.json"), MAX_LEN), os.path.join(OUT, "reference.json"))

if __name__ == "__main__":
    main()
