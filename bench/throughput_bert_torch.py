"""The Hugging Face `transformers` twin of `engram bench throughput --model bert`.

Same model (`BertModel` without its pooler, from a Hugging Face directory with --init or a
random geometry with --layers/--hidden/--heads/--ffn, dropout 0.1 in training, then dropout and a
linear head on the [CLS] token: engram's `cls` pooling), optimiser (SGD with momentum 0.9, or
AdamW with weight decay 0.01, at --lr), batch size, sequence length and random token ids (all
attended, drawn uniformly from the vocabulary without the pad id 0, 16 batches cycled); each step
slices a batch from a host tensor, moves it to the device, runs forward, cross-entropy, backward
and the optimiser step. With --lora-rank R, PEFT's LoraConfig (r = R, lora_alpha = 2R, query and
value, no dropout) wraps the BertModel and only its adapters and the head train, as engram's
`--lora-rank` does with its `lora`. Prints one JSON line: {"train_samples_per_s": ..., "peak_rss_bytes": ...}
(peak resident set size of this process: getrusage's ru_maxrss). `engram bench throughput
--model bert` runs it (embedded in the binary, on standard input) for each thread count.
"""
import argparse
import json
import resource
import time

import torch
import transformers


def build(a, dev):
    if a.init:
        bert = transformers.BertModel.from_pretrained(a.init, add_pooling_layer=False)
    else:
        cfg = transformers.BertConfig(
            vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
            num_attention_heads=a.heads, intermediate_size=a.ffn,
        )
        bert = transformers.BertModel(cfg, add_pooling_layer=False)
    head = torch.nn.Sequential(
        torch.nn.Dropout(bert.config.hidden_dropout_prob),
        torch.nn.Linear(bert.config.hidden_size, a.classes),
    )
    return bert.to(dev).train(), head.to(dev).train()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--init", default="", help="a Hugging Face directory (weights)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ffn", type=int, default=1536)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--classes", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: PyTorch's default)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--lora-rank", type=int, default=0,
                   help="PEFT LoRA of this rank (alpha 2 x rank) on query and value; 0: full")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    bert, head = build(a, dev)
    vocab = bert.config.vocab_size
    peft_version = None
    if a.lora_rank > 0:
        import peft
        cfg = peft.LoraConfig(r=a.lora_rank, lora_alpha=2 * a.lora_rank,
                              target_modules=["query", "value"], lora_dropout=0.0)
        bert = peft.get_peft_model(bert, cfg)
        peft_version = peft.__version__
    params = [p for p in bert.parameters() if p.requires_grad] + list(head.parameters())
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=a.lr, momentum=0.9)
    else:
        opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.01)
    pool = 16
    ids = torch.randint(1, vocab, (pool * a.batch, a.seq_len))
    ys = torch.randint(0, a.classes, (pool * a.batch,))
    mask = torch.ones(a.batch, a.seq_len, dtype=torch.long)
    loss_fn = torch.nn.CrossEntropyLoss()
    start = time.perf_counter()
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            sync()
            start = time.perf_counter()
        k = s % pool
        x = ids[k * a.batch:(k + 1) * a.batch].to(dev)
        y = ys[k * a.batch:(k + 1) * a.batch].to(dev)
        opt.zero_grad(set_to_none=True)
        hidden = bert(input_ids=x, attention_mask=mask.to(dev)).last_hidden_state
        loss = loss_fn(head(hidden[:, 0]), y)
        loss.backward()
        opt.step()
    sync()
    secs = time.perf_counter() - start
    print(json.dumps({
        "train_samples_per_s": a.steps * a.batch / secs,
        "step_seconds": secs / a.steps,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft_version,
        "threads": torch.get_num_threads(),
        "device": str(dev),
        "attention": getattr(bert.config, "_attn_implementation", None),
    }))


if __name__ == "__main__":
    main()
