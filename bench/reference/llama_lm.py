#!/usr/bin/env python3
"""Reference values for `engram perplexity` and `engram generate` (issue #31, item 3).

On the tiny random Llama GGUF (tests/data/gguf/llama-tiny.gguf, bench/reference/llama_gguf.py),
loaded by transformers itself (`LlamaForCausalLM.from_pretrained(dir, gguf_file=...)`, float32,
CPU, eager attention) with the GGUF's own tokenizer (`AutoTokenizer`, default special tokens):

1. perplexity: each non-empty line of tests/data/gguf/lm-text.txt is a document; its ids
   (`tokenizer(line).input_ids`) followed by the eos id, concatenated, cut into windows of
   WINDOW tokens, the last partial window dropped (Hugging Face run_clm.py's group_texts);
   perplexity = exp(mean over every window of the model's shifted next-token cross-entropy);
2. generate: `model.generate(prompt ids, do_sample=False, max_new_tokens=N)` (greedy).

Writes tests/data/gguf/llama-tiny-lm.json, and tests/data/gguf/llama-tiny-tokenizer.json: the
GGUF's tokenizer as transformers converts it (`backend_tokenizer.save`), so that the Hugging
Face directory tests/data/llama-tiny/ (the same weights) with it as tokenizer.json is a second
MODEL for the same figures. Pinned: torch 2.15.0, transformers 5.25.0,
gguf 0.19.0 (other versions refused unless --any-version).

With `--smollm2 FILE.gguf` (`engram data fetch smollm2`), the same two figures for SmolLM2-135M-
Instruct (dequantised to float32 by transformers) on tests/data/gguf/smollm2-lm-text.txt (two
Austen sentences, windows of 32) and the prompt "The capital of France is" (12 new tokens),
written to tests/data/gguf/smollm2-lm.json.

Usage: python3 bench/reference/llama_lm.py [--any-version] [--smollm2 FILE.gguf]
"""

import importlib.metadata
import json
import math
import os
import sys

PINNED = {"torch": "2.15.0", "transformers": "5.25.0", "gguf": "0.19.0"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GGUF_DIR = os.path.join(ROOT, "tests", "data", "gguf")
WINDOW = 8
PROMPT = "the cat"
NEW_TOKENS = 10


def figures(gguf_dir, name, text_file, window, prompt_text, new_tokens):
    """(perplexity figures, generation figures) of the GGUF `name` in `gguf_dir`."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(gguf_dir, gguf_file=name)
    model = transformers.LlamaForCausalLM.from_pretrained(
        gguf_dir, gguf_file=name, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    eos = model.config.eos_token_id
    with open(text_file, encoding="utf-8") as f:
        docs = [l for l in f.read().splitlines() if l.strip()]
    stream = []
    for d in docs:
        stream += tok(d).input_ids + [eos]
    n = len(stream) // window
    windows = [stream[i * window:(i + 1) * window] for i in range(n)]
    with torch.no_grad():
        x = torch.tensor(windows)
        logits = model(x).logits.double()
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        nll = -logp.gather(2, x[:, 1:, None]).squeeze(2)
        mean_nll = nll.mean().item()
        prompt = tok(prompt_text, return_tensors="pt").input_ids
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=eos)
    return tok, {
        "eos": eos,
        "window": window,
        "windows": windows,
        "dropped_tokens": len(stream) - n * window,
        "tokens": n * (window - 1),
        "mean_nll": mean_nll,
        "perplexity": math.exp(mean_nll),
        "prompt": prompt_text,
        "prompt_ids": prompt[0].tolist(),
        "max_new_tokens": new_tokens,
        "generated_ids": out[0, prompt.shape[1]:].tolist(),
    }


def main():
    import gguf
    import torch
    import transformers

    versions = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                "gguf": importlib.metadata.version("gguf")}
    if versions != PINNED and "--any-version" not in sys.argv:
        sys.exit(f"versions {versions} differ from the pinned {PINNED} (--any-version to go on)")
    torch.manual_seed(0)
    if "--smollm2" in sys.argv:
        path = os.path.abspath(sys.argv[sys.argv.index("--smollm2") + 1])
        _, r = figures(os.path.dirname(path), os.path.basename(path),
                       os.path.join(GGUF_DIR, "smollm2-lm-text.txt"), 32,
                       "The capital of France is", 12)
        r = {"source": "bench/reference/llama_lm.py", "versions": versions,
             "model": os.path.basename(path), "text": "tests/data/gguf/smollm2-lm-text.txt", **r}
        with open(os.path.join(GGUF_DIR, "smollm2-lm.json"), "w") as f:
            json.dump(r, f)
            f.write("\n")
        print(json.dumps({k: v for k, v in r.items() if k != "windows"}))
    tok, r = figures(GGUF_DIR, "llama-tiny.gguf", os.path.join(GGUF_DIR, "lm-text.txt"), WINDOW,
                     PROMPT, NEW_TOKENS)
    result = {"source": "bench/reference/llama_lm.py", "versions": versions,
              "model": "tests/data/gguf/llama-tiny.gguf", "text": "tests/data/gguf/lm-text.txt", **r}
    tok.backend_tokenizer.save(os.path.join(GGUF_DIR, "llama-tiny-tokenizer.json"))
    with open(os.path.join(GGUF_DIR, "llama-tiny-lm.json"), "w") as f:
        json.dump(result, f)
        f.write("\n")
    print(json.dumps({k: v for k, v in result.items() if k != "windows"}))


if __name__ == "__main__":
    main()
