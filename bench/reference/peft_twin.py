#!/usr/bin/env python3
"""engram's LoRA and Hugging Face PEFT's on the same stream, from the same weights (issue #30).

PyTorch, transformers and PEFT are the peer engram is measured beside, never a dependency of it.
bench/peft-twin.sh runs both sides; this file is the PEFT side. Two commands:

    peft_twin.py init DIR --base BASE --classes C --seed S [--rank R] [--alpha A]
        The starting weights of both runs: PEFT's LoraConfig (r = R, lora_alpha = A, query and
        value, no dropout, bias "none") over BASE's BertModel with PEFT's own initialisation
        (A Kaiming-uniform, B = 0) and a classification head torch.nn.Linear(hidden, C), both
        drawn after torch.manual_seed(S). Saved as PEFT saves an adapter, with the head as
        engram's export writes it (engram_head.safetensors, engram_head.json, mean pooling), so
        that engram's `[model] adapter = DIR` starts from exactly these weights.

    peft_twin.py train STREAM.json DIR --base BASE --lr LR --out OUT.json [--threads N]
        Trains DIR's adapters and head on STREAM.json, what `engram data stream` wrote for the
        engram run's config: each task's training rows in engram's order, `batch_size` rows a
        step; the loss is the mean cross-entropy of the mean-pooled head's logits with the
        classes outside the task's `allowed` set to -1e9 (engram's mask_logits); torch's AdamW
        with Burn's AdamWConfig defaults and engram's weight decay (betas 0.9 / 0.999, eps 1e-5,
        weight decay 0), a new optimiser at each task (engram's reset_per_task); no dropout
        anywhere (the engram config sets `[model] dropout = 0.0`: a dropout mask is a random
        draw neither side can share). After each task every task is evaluated on its eval
        rows, the logits restricted to the same `allowed` set. OUT.json gets the accuracy
        matrix (row t: every task after training task t, as engram's report has it: a task
        whose classes are not seen yet scores 0), ACC (the last row's mean), the training
        seconds (forward, backward and optimiser step; evaluation excluded), samples/s, and
        the versions.

Usage:
    /tmp/venv-ref/bin/pip install torch==2.15.0 transformers==5.25.0 peft==0.21.2
    see bench/peft-twin.sh
"""

import argparse
import json
import os
import time

import torch

HEAD_WEIGHTS = "engram_head.safetensors"
HEAD_CONFIG = "engram_head.json"


def base_model(path):
    import transformers

    # No dropout: engram's side runs with [model] dropout = 0.0 (see the module docs).
    return transformers.BertModel.from_pretrained(
        path, add_pooling_layer=False, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)


def init(a):
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file

    torch.manual_seed(a.seed)
    bert = base_model(a.base)
    model = get_peft_model(bert, LoraConfig(
        r=a.rank, lora_alpha=a.alpha, target_modules=["query", "value"], lora_dropout=0.0,
        bias="none"))
    head = torch.nn.Linear(bert.config.hidden_size, a.classes)
    os.makedirs(a.dir, exist_ok=True)
    model.save_pretrained(a.dir)
    readme = os.path.join(a.dir, "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    save_file({"weight": head.weight.detach().contiguous(),
               "bias": head.bias.detach().contiguous()}, os.path.join(a.dir, HEAD_WEIGHTS))
    with open(os.path.join(a.dir, HEAD_CONFIG), "w") as f:
        json.dump({"weights": HEAD_WEIGHTS, "pooling": "mean",
                   "pad_token_id": bert.config.pad_token_id or 0}, f, indent=2)
        f.write("\n")
    print(f"{a.dir}: PEFT LoRA r={a.rank} alpha={a.alpha} on query/value, head "
          f"[{a.classes}, {bert.config.hidden_size}], seed {a.seed}")


def train(a):
    import peft
    import transformers
    from peft import PeftModel
    from safetensors.torch import load_file

    torch.set_num_threads(a.threads)
    with open(a.stream) as f:
        stream = json.load(f)
    with open(os.path.join(a.dir, HEAD_CONFIG)) as f:
        head_cfg = json.load(f)
    if head_cfg["pooling"] != "mean":
        raise SystemExit(f"{a.dir}: pooling {head_cfg['pooling']}; this twin pools by the mean")
    pad = head_cfg["pad_token_id"]
    model = PeftModel.from_pretrained(base_model(a.base), a.dir, is_trainable=True)
    w = load_file(os.path.join(a.dir, HEAD_WEIGHTS))
    head = torch.nn.Linear(w["weight"].shape[1], w["weight"].shape[0])
    with torch.no_grad():
        head.weight.copy_(w["weight"])
        head.bias.copy_(w["bias"])
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    classes = stream["classes"]

    def logits(ids, allowed):
        mask = (ids != pad).long()
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        out = head(pooled)
        if allowed is not None:
            off = torch.full((classes,), -1e9)
            off[allowed] = 0.0
            out = out + off
        return out

    tasks = stream["tasks"]
    matrix = [[0.0] * len(tasks) for _ in tasks]
    train_s, samples, bs = 0.0, 0, stream["batch_size"]
    for t, task in enumerate(tasks):
        opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-5, weight_decay=0.0)
        rows = len(task["train"]["rows"]) // stream["epochs"]
        ids_all = torch.tensor(task["train"]["ids"], dtype=torch.long)
        y_all = torch.tensor(task["train"]["labels"], dtype=torch.long)
        model.train()
        start = time.perf_counter()
        for e in range(stream["epochs"]):
            for i in range(e * rows, (e + 1) * rows, bs):
                j = min(i + bs, (e + 1) * rows)
                loss = torch.nn.functional.cross_entropy(
                    logits(ids_all[i:j], task["allowed"]), y_all[i:j])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                samples += j - i
        train_s += time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            for k in range(len(tasks)):
                ev = tasks[k]["eval"]
                ids = torch.tensor(ev["ids"], dtype=torch.long)
                y = torch.tensor(ev["labels"], dtype=torch.long)
                right = 0
                for i in range(0, len(y), 64):
                    right += (logits(ids[i:i + 64], task["allowed"]).argmax(1)
                              == y[i:i + 64]).sum().item()
                matrix[t][k] = right / len(y)
        print(f"task {t}: " + " ".join(f"{v:.4f}" for v in matrix[t]), flush=True)
    result = {
        "accuracy_matrix": matrix,
        "acc": sum(matrix[-1]) / len(tasks),
        "train_s": train_s,
        "train_samples": samples,
        "train_samples_per_s": samples / train_s,
        "threads": a.threads,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "peft": peft.__version__},
    }
    with open(a.out + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(a.out + ".tmp", a.out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    i = sub.add_parser("init")
    i.add_argument("dir")
    i.add_argument("--base", required=True)
    i.add_argument("--classes", type=int, required=True)
    i.add_argument("--seed", type=int, required=True)
    i.add_argument("--rank", type=int, default=8)
    i.add_argument("--alpha", type=float, default=16.0)
    t = sub.add_parser("train")
    t.add_argument("stream")
    t.add_argument("dir")
    t.add_argument("--base", required=True)
    t.add_argument("--lr", type=float, required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    init(a) if a.command == "init" else train(a)


if __name__ == "__main__":
    main()
