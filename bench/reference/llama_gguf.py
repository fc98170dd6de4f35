#!/usr/bin/env python3
"""Reference values for engram's Llama decoder from GGUF (issue #31, item 2, the GGUF half).

1. tests/data/gguf/llama-tiny.gguf: the tied tiny random checkpoint of
   bench/reference/llama_tiny.py (tests/data/llama-tiny/) as ONE F32 GGUF (and
   llama-tiny-untied.gguf from tests/data/llama-tiny-untied/, with its `output`), written with the
   `gguf` package as llama.cpp's convert_hf_to_gguf.py writes a LlamaForCausalLM:
   - metadata: general.architecture = llama, llama.{context_length, embedding_length,
     block_count, feed_forward_length, rope.dimension_count, attention.head_count,
     attention.head_count_kv, attention.layer_norm_rms_epsilon, rope.freq_base, vocab_size},
     general.file_type = 0 (all F32);
   - tensors: token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
     ffn_gate, ffn_up, ffn_down}, output_norm (`output` only when untied), with
     attn_q / attn_k rows PERMUTED for llama.cpp's adjacent-pair rotation (convert's
     `permute`), which a loader must undo;
   - a byte-level BPE tokenizer (tokenizer.ggml.model = gpt2) of exactly the model's 300 ids:
     3 control tokens, GPT-2's 256 byte characters, 41 merges.
   The reference logits stay tests/data/llama-tiny/reference.json (the HF model's): a loader that
   gets the un-permutation wrong does not reproduce them. With torch and transformers present,
   the script checks that transformers itself, loading this GGUF
   (`from_pretrained(dir, gguf_file=…)`), reproduces them, and writes
   tests/data/gguf/llama-tiny.json: transformers' ids for a few texts with this tokenizer.

2. With `--smollm2 FILE.gguf` (SmolLM2-135M-Instruct.Q4_1.gguf, `engram data fetch smollm2`):
   tests/data/gguf/smollm2-logits.json, transformers' next-token logits of
   `AutoModelForCausalLM.from_pretrained(dir, gguf_file=…)` (dequantised to float32, CPU,
   eager attention) on the ids of a few texts (with digits) from the GGUF's own tokenizer: for
   every position the 10 largest logits (ids and values), the first 16 logits, and max |logit|.

Pinned: torch 2.15.0, transformers 5.25.0, gguf 0.19.0 (recorded in the JSON; other versions
are refused unless --any-version is given).

Usage: python3 bench/reference/llama_gguf.py [--any-version] [--smollm2 FILE.gguf]
"""

import json
import os
import sys

PINNED = {"torch": "2.15.0", "transformers": "5.25.0", "gguf": "0.19.0"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGE_PAIRS = [
    "Ġ t", "h e", "Ġ a", "i n", "e r", "a n", "r e", "o n", "Ġ s", "a t", "e n", "n d", "t i",
    "e s", "o r", "t e", "o f", "e d", "i s", "i t", "a l", "a r", "s t", "t o", "n t", "n g",
    "s e", "h a", "a s", "o u", "i o", "l e", "v e", "c o", "m e", "d e", "h i", "r i", "r o",
    "i c", "n e",
]
TINY_TEXTS = ["the cat sat on the mat", "In 1815, 12345 apples cost $3.50.", "<|im_start|>hi there"]
SMOLLM2_TEXTS = [
    "The capital of France is",
    "In 1815, 12345 apples cost $3.50 (or 3,50 €).",
    "def add(a, b):\n    return a + b  # 2 + 2 = 4",
]
TOP = 10
SLICE = 16


def versions():
    got = {}
    import gguf

    got["gguf"] = getattr(gguf, "__version__", None) or __import__("importlib.metadata").metadata.version("gguf")
    try:
        import torch
        import transformers

        got["torch"] = torch.__version__.split("+")[0]
        got["transformers"] = transformers.__version__
    except ImportError:
        pass
    for k, v in PINNED.items():
        if k in got and got[k] != v and "--any-version" not in sys.argv:
            sys.exit(f"{k} {got[k]} differs from the pinned {v}; pass --any-version to go on")
    return got


def bytes_to_unicode():
    """GPT-2's byte-to-character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: rows regrouped for adjacent-pair rotation."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny(name, out):
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    src = os.path.join(DATA, name)
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = load_file(os.path.join(src, "model.safetensors"))
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    rope = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta"))
    alphabet = [bytes_to_unicode()[b] for b in range(256)]
    tokens = SPECIALS + alphabet + [p.replace(" ", "") for p in MERGE_PAIRS]
    assert len(tokens) == cfg["vocab_size"] == len(set(tokens)), len(tokens)
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))

    w = gguf.GGUFWriter(out, "llama")
    w.add_name(name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_rope_dimension_count(d // heads)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(rope)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGE_PAIRS)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)

    def t(name, a):
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))

    t("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(layers):
        p = f"model.layers.{i}."
        t(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        t(f"blk.{i}.attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], heads))
        t(f"blk.{i}.attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], kv))
        t(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        t(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        t(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        t(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        t(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        t(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    t("output_norm.weight", sd["model.norm.weight"])
    if not cfg.get("tie_word_embeddings", True):
        t("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}: {os.path.getsize(out)} bytes")


def check_tiny(name, out, vers):
    """transformers, loading the GGUF, reproduces the HF model's reference logits (and, for
    llama-tiny, writes its tokenizer's ids)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        print("torch/transformers absent: transformers' check of the GGUF skipped")
        return
    torch.set_num_threads(1)
    d, fname = os.path.split(out)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=fname, dtype=torch.float32, attn_implementation="eager").eval()
    ref = json.load(open(os.path.join(DATA, name, "reference.json")))
    worst, scale = 0.0, 0.0
    with torch.no_grad():
        for s in ref["samples"]:
            got = model(input_ids=torch.tensor([s["ids"]])).logits[0]
            want = torch.tensor(s["logits"])
            worst = max(worst, (got - want).abs().max().item())
            scale = max(scale, want.abs().max().item())
    print(f"{name}: transformers on the GGUF vs the HF reference: max |Δ| {worst:.3e}, max |logit| {scale:.3f}")
    assert worst <= 1e-4 * scale, "transformers does not reproduce the reference from the GGUF"
    if name != "llama-tiny":
        return
    tok = AutoTokenizer.from_pretrained(d, gguf_file=fname)
    texts = [{"text": x, "ids": tok(x)["input_ids"]} for x in TINY_TEXTS]
    with open(os.path.join(d, "llama-tiny.json"), "w") as fh:
        json.dump({"source": "bench/reference/llama_gguf.py", "versions": vers,
                   "transformers_max_abs_delta": worst, "texts": texts}, fh, ensure_ascii=False)
        fh.write("\n")
    print(f"wrote {os.path.join(d, 'llama-tiny.json')}")


def smollm2(path, vers):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    d, name = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32, attn_implementation="eager").eval()
    samples = []
    with torch.no_grad():
        for text in SMOLLM2_TEXTS:
            ids = tok(text)["input_ids"]
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            top = logits.topk(TOP, dim=-1)
            samples.append({
                "text": text,
                "ids": ids,
                "top_ids": top.indices.tolist(),
                "top_logits": [[float(f"{v:.7g}") for v in r] for r in top.values.tolist()],
                "first_logits": [[float(f"{v:.7g}") for v in r] for r in logits[:, :SLICE].tolist()],
                "max_abs_logit": [float(f"{v:.7g}") for v in logits.abs().max(dim=-1).values.tolist()],
            })
    out = os.path.join(DATA, "gguf", "smollm2-logits.json")
    with open(out, "w") as fh:
        json.dump({"source": "bench/reference/llama_gguf.py --smollm2 (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...), float32, CPU, eager)",
                   "file": name, "versions": vers, "samples": samples}, fh, ensure_ascii=False)
        fh.write("\n")
    print(f"wrote {out}: {os.path.getsize(out)} bytes")


def main():
    vers = versions()
    if "--smollm2" in sys.argv:
        smollm2(sys.argv[sys.argv.index("--smollm2") + 1], vers)
        return
    for name in ["llama-tiny", "llama-tiny-untied"]:
        out = os.path.join(DATA, "gguf", f"{name}.gguf")
        write_tiny(name, out)
        check_tiny(name, out, vers)


if __name__ == "__main__":
    main()
