#!/usr/bin/env python3
"""Reference values for engram's Llama decoder (issue #31, item 2): tiny random
LlamaForCausalLM checkpoints and their next-token logits, written to tests/data/:

- llama-tiny/          tied embeddings (2 layers, hidden 32, 4 query heads, 2 key/value heads,
                       FFN 64, vocabulary 300, RoPE base 1e5, RMSNorm eps 1e-5)
- llama-tiny-untied/   the same geometry with its own output head (lm_head.weight)

Each directory holds what `save_pretrained` writes (config.json, model.safetensors in PyTorch
layout: Linear weights [out, in], q/k un-permuted, i.e. transformers' rotate-half layout) and
reference.json: for each id sequence, the ids and the logits [len, vocab] of transformers'
LlamaForCausalLM in float32 on the CPU (eager attention, causal mask, no padding).

The weights are drawn wider than transformers' N(0, 0.02) default (embeddings N(0, 1), linear
weights N(0, 1/fan_in) scaled, norms 1 + N(0, 0.1)) so that every layer changes the logits.

Pinned: torch 2.15.0, transformers 5.25.0, safetensors 0.8.0 (the versions this was run with;
the script records the ones it ran with in reference.json and refuses others unless
--any-version is given).

Usage: python3 bench/reference/llama_tiny.py [--any-version] [OUT_ROOT]
(needs torch, transformers, safetensors; OUT_ROOT defaults to tests/data)
"""

import json
import math
import os
import sys

PINNED = {"torch": "2.15.0", "transformers": "5.25.0"}

CONFIG = dict(
    vocab_size=300,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rope_theta=1e5,
    rms_norm_eps=1e-5,
    max_position_embeddings=64,
    hidden_act="silu",
    attention_bias=False,
    mlp_bias=False,
    bos_token_id=1,
    eos_token_id=2,
)

# Three id sequences of different lengths (no padding: each is run on its own).
IDS = [
    [1, 45, 17, 288, 5, 3, 99, 250, 12, 7, 64, 199],
    [1, 9, 298, 33, 61, 72, 14],
    [1, 77, 3, 150, 2],
]


def check_versions(torch, transformers):
    got = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__}
    if got != PINNED and "--any-version" not in sys.argv:
        sys.exit(f"versions {got} differ from the pinned {PINNED}; pass --any-version to go on")
    return got


def randomise(model, torch, seed):
    """Redraws every parameter (see the module docs)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / math.sqrt(fan_in)))


def write(out, tied, seed, torch, transformers, versions):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(tie_word_embeddings=tied, **CONFIG)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    randomise(model, torch, seed)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    # save_pretrained also writes generation_config.json: not needed.
    gen = os.path.join(out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    samples = []
    with torch.no_grad():
        for ids in IDS:
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            samples.append(
                {
                    "ids": ids,
                    "logits": [[float(f"{v:.7g}") for v in row] for row in logits.tolist()],
                }
            )
    n_params = sum(p.numel() for p in model.parameters())
    ref = {
        "source": "bench/reference/llama_tiny.py (transformers LlamaForCausalLM, float32, CPU)",
        "versions": versions,
        "tied": tied,
        "parameters": n_params,
        "samples": samples,
    }
    with open(os.path.join(out, "reference.json"), "w") as fh:
        json.dump(ref, fh)
        fh.write("\n")
    print(f"wrote {out}: {n_params} parameters, tied={tied}")


def smollm2_parameters(torch):
    """transformers' parameter count of SmolLM2-135M's geometry (tied), on the meta device."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        rope_theta=1e5,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    return sum(p.numel() for p in model.parameters())


def main():
    import torch
    import transformers

    versions = check_versions(torch, transformers)
    torch.set_num_threads(1)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = args[0] if args else os.path.join(root, "tests", "data")
    write(os.path.join(out, "llama-tiny"), True, 0, torch, transformers, versions)
    write(os.path.join(out, "llama-tiny-untied"), False, 1, torch, transformers, versions)
    print(f"SmolLM2-135M geometry (tied): {smollm2_parameters(torch)} parameters")


if __name__ == "__main__":
    main()
