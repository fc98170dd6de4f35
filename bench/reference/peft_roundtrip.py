#!/usr/bin/env python3
"""engram's PEFT export checked by Hugging Face PEFT itself (issue #30).

Two commands:

    peft_roundtrip.py fixture OUT.json ADAPTER_DIR
        Wraps the tiny BertModel of tests/data/bert-tiny with PEFT's get_peft_model
        (LoraConfig r=2, lora_alpha=4, target_modules ["query", "value"], modules_to_save both
        layers' attention.output.LayerNorm: what tests/engram/peft.rs's run trains), saves it
        with save_pretrained and writes what PEFT wrote: every key of adapter_model.safetensors
        with its shape, and the fields of adapter_config.json engram writes too. The test holds
        `engram export --peft`'s keys, shapes and config against this file.
        Then the same config with random factors (init_lora_weights=False, seed 0, so B is not
        zero) and the saved norms moved (weight + 0.1, bias - 0.05) is saved to ADAPTER_DIR,
        and OUT.json's `reference` holds PEFT's mean-pooled last hidden state [3, 32] on three
        padded id rows: engram's `[model] adapter = ADAPTER_DIR` must give the same vectors.

    peft_roundtrip.py compare PEFT_DIR PROBE.json [--base DIR]
        Loads the base BertModel (--base, else the adapter's base_model_name_or_path),
        PeftModel.from_pretrained(base, PEFT_DIR), and engram's head from PEFT_DIR
        (engram_head.safetensors: weight [classes, hidden], bias; engram_head.json: pooling and
        pad id), runs PROBE.json's token ids (engram's test writes them with engram's logits)
        and prints the max abs difference between the two models' logits; exits 1 when it is
        above 1e-4.

Usage (torch, transformers and peft are references only, never engram dependencies):
    /tmp/venv-ref/bin/pip install torch==2.15.0 transformers==5.25.0 peft==0.21.2
    /tmp/venv-ref/bin/python bench/reference/peft_roundtrip.py fixture \
        tests/data/peft-keys.json tests/data/peft-tiny-adapter
"""

import json
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "..", "..", "tests", "data", "bert-tiny")
CONFIG_FIELDS = [
    "peft_type", "task_type", "r", "lora_alpha", "target_modules", "lora_dropout", "bias",
    "fan_in_fan_out", "modules_to_save", "use_rslora", "use_dora",
]


def fixture(out, adapter_dir):
    import peft
    import transformers
    from peft import LoraConfig, get_peft_model
    from safetensors import safe_open
    from transformers import BertModel

    base = BertModel.from_pretrained(TINY)
    config = LoraConfig(
        r=2,
        lora_alpha=4,
        target_modules=["query", "value"],
        lora_dropout=0.0,
        bias="none",
        modules_to_save=[f"encoder.layer.{i}.attention.output.LayerNorm" for i in range(2)],
    )
    model = get_peft_model(base, config)
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        with safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as f:
            keys = {k: list(f.get_tensor(k).shape) for k in sorted(f.keys())}
        with open(os.path.join(d, "adapter_config.json")) as f:
            saved = json.load(f)
    fields = {k: saved[k] for k in CONFIG_FIELDS}
    fields["target_modules"] = sorted(fields["target_modules"])
    result = {
        "about": "What PEFT's save_pretrained writes for bert-tiny with LoRA r=2 on query and "
                 "value and both attention.output.LayerNorm saved; written by "
                 "bench/reference/peft_roundtrip.py fixture",
        "versions": {"peft": peft.__version__, "transformers": transformers.__version__,
                     "torch": torch.__version__},
        "keys": keys,
        "config": fields,
    }
    result["reference"] = adapter_reference(adapter_dir, config)
    with open(out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{out}: {len(keys)} keys; {adapter_dir}: a random adapter")


# Three id rows of max_len 12 within bert-tiny's vocabulary of 99, padded with 0 (the test's).
IDS = [
    [2, 40, 41, 42, 43, 44, 3, 0, 0, 0, 0, 0],
    [2, 50, 61, 72, 83, 94, 15, 26, 37, 48, 59, 3],
    [2, 7, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0],
]


def adapter_reference(adapter_dir, config):
    """A random PEFT adapter saved to adapter_dir, and its mean-pooled outputs on IDS."""
    from peft import LoraConfig, get_peft_model
    from transformers import BertModel

    torch.manual_seed(0)
    base = BertModel.from_pretrained(TINY, attn_implementation="eager")
    kwargs = config.to_dict()
    kwargs.update(init_lora_weights=False)
    for k in ["peft_type", "revision", "task_type", "base_model_name_or_path", "auto_mapping",
              "inference_mode", "peft_version"]:
        kwargs.pop(k, None)
    model = get_peft_model(base, LoraConfig(**kwargs))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "modules_to_save" in name:
                p.add_(0.1 if name.endswith("weight") else -0.05)
    model.save_pretrained(adapter_dir)
    # The model card PEFT adds is not needed; the base is named relative to the repository.
    os.remove(os.path.join(adapter_dir, "README.md"))
    cfg_file = os.path.join(adapter_dir, "adapter_config.json")
    with open(cfg_file) as f:
        saved = json.load(f)
    saved["base_model_name_or_path"] = "tests/data/bert-tiny"
    with open(cfg_file, "w") as f:
        json.dump(saved, f, indent=2, sort_keys=True)
        f.write("\n")
    model.eval()
    ids = torch.tensor(IDS)
    mask = (ids != 0).long()
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).float()
        mean = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return {"ids": IDS, "mean": [[round(v, 7) for v in row] for row in mean.tolist()]}


def compare(peft_dir, probe_file, base_dir=None):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import BertModel

    with open(os.path.join(peft_dir, "adapter_config.json")) as f:
        adapter = json.load(f)
    base_dir = base_dir or adapter["base_model_name_or_path"]
    with open(os.path.join(peft_dir, "engram_head.json")) as f:
        head = json.load(f)
    weights = load_file(os.path.join(peft_dir, head["weights"]))
    with open(probe_file) as f:
        probe = json.load(f)

    base = BertModel.from_pretrained(base_dir, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, peft_dir).eval()
    ids = torch.tensor(probe["ids"], dtype=torch.long)
    mask = (ids != head["pad_token_id"]).long()
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        if head["pooling"] == "cls":
            pooled = hidden[:, 0]
        else:
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        logits = pooled @ weights["weight"].T + weights.get("bias", 0)
    want = torch.tensor(probe["logits"], dtype=logits.dtype)
    worst = (logits - want).abs().max().item()
    spread = want.abs().max().item()
    print(f"{len(probe['ids'])} sequences, {logits.shape[1]} classes, base {base_dir}: "
          f"max abs logit difference PEFT vs engram {worst:.3e} (largest |logit| {spread:.3f})")
    return worst


def main(argv):
    if len(argv) == 4 and argv[1] == "fixture":
        fixture(argv[2], argv[3])
    elif len(argv) in (4, 6) and argv[1] == "compare":
        base = argv[5] if len(argv) == 6 and argv[4] == "--base" else None
        if compare(argv[2], argv[3], base) > 1e-4:
            sys.exit(1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
