"""The PyTorch twin of `engram bench throughput --model cnn|vit`.

The same network as engram's benchmark model, the same loop and the same data shape:
* cnn: engram's `model::cnn` (the recipe's, examples/cnn/split-fmnist.toml, at depth 2 width 16):
  per block a 3x3 convolution with padding 1, ReLU, batch norm, 2x2 max pooling, channels
  width, 2*width; then the flattened maps to a linear head of 10 classes.
* vit: engram's `model::vit`: 7x7 patches of the 28x28 image (16 tokens) embedded by a linear
  layer plus a learned position table, `depth` pre-norm encoder blocks of width `width`
  (4 heads; q, k, v and output projections with bias; softmax(q k^T / sqrt(d_head)) with dropout
  on the weights; dropout after each residual branch; an MLP of 2*width with exact GELU), a final
  layer norm, the mean over tokens and a linear head; dropout 0.1, layer norm eps 1e-5.
Optimiser: SGD with momentum 0.9 (lr 0.05) or AdamW (lr 1e-3, weight decay 0.01), as engram's
`BenchOptimizer`. Data: 16 batches of flat [batch, 784] inputs uniform in [-1, 1) and random
labels, drawn once and cycled; each step slices a batch, runs forward, cross-entropy, backward and
the optimiser step. Prints one JSON line: {"train_samples_per_s": ..., "peak_rss_bytes": ...}.
`engram bench throughput` runs it (embedded in the binary, on standard input) for each thread
count it compares.
"""
import argparse
import json
import math
import resource
import time

import torch
from torch import nn


class Attention(nn.Module):
    """Burn's MultiHeadAttention: four biased projections, scaled dot product, dropout."""

    def __init__(self, d, heads, p):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.query, self.key, self.value, self.output = (nn.Linear(d, d) for _ in range(4))
        self.drop = nn.Dropout(p)

    def forward(self, x):
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.h, self.dk).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        w = self.drop(torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dk), dim=-1))
        return self.output((w @ v).transpose(1, 2).reshape(b, t, d))


class Encoder(nn.Module):
    """engram's pre-norm EncoderBlock."""

    def __init__(self, d, heads, ratio, p):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attention = Attention(d, heads, p)
        self.fc1, self.fc2 = nn.Linear(d, d * ratio), nn.Linear(d * ratio, d)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        x = x + self.drop(self.attention(self.norm1(x)))
        return x + self.drop(self.fc2(nn.functional.gelu(self.fc1(self.norm2(x)))))


class Vit(nn.Module):
    """engram's ViT on [batch, 784]: patch embedding, encoder blocks, token-mean head."""

    def __init__(self, depth, width, side=28, patch=7, heads=4, ratio=2, p=0.1, classes=10):
        super().__init__()
        self.g, self.p = side // patch, patch
        self.proj = nn.Linear(patch * patch, width)
        self.position = nn.Parameter(torch.rand(self.g * self.g, width) * 0.04 - 0.02)
        self.blocks = nn.Sequential(*(Encoder(width, heads, ratio, p) for _ in range(depth)))
        self.norm, self.linear = nn.LayerNorm(width), nn.Linear(width, classes)

    def forward(self, x):
        b, g, p = x.shape[0], self.g, self.p
        x = x.view(b, 1, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(b, g * g, p * p)
        x = self.blocks(self.proj(x) + self.position)
        return self.linear(self.norm(x).mean(1))


def cnn(depth, width, classes=10):
    """engram's CNN on [batch, 784]: conv blocks (conv, ReLU, batch norm, pool), flatten, linear."""
    layers, c, side = [nn.Unflatten(1, (1, 28, 28))], 1, 28
    for i in range(depth):
        o = width << i
        layers += [nn.Conv2d(c, o, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(o), nn.MaxPool2d(2)]
        c, side = o, side // 2
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(c * side * side, classes))


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--model", choices=["cnn", "vit"], required=True)
    a.add_argument("--depth", type=int, required=True)
    a.add_argument("--width", type=int, required=True)
    a.add_argument("--batch", type=int, default=128)
    a.add_argument("--steps", type=int, default=50)
    a.add_argument("--warmup", type=int, default=20)
    a.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    a.add_argument("--lr", type=float, default=0.05)
    a.add_argument("--threads", type=int, default=0, help="intra-op threads (0: PyTorch's default)")
    a.add_argument("--device", default="cpu", help="cpu or cuda")
    a = a.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model = (cnn(a.depth, a.width) if a.model == "cnn" else Vit(a.depth, a.width)).to(dev)
    model.train()
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    pool = 16
    xs = torch.rand(pool * a.batch, 784) * 2 - 1
    ys = torch.randint(0, 10, (pool * a.batch,))
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            sync()
            start = time.perf_counter()
        k = s % pool
        x = xs[k * a.batch:(k + 1) * a.batch].to(dev)
        y = ys[k * a.batch:(k + 1) * a.batch].to(dev)
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    sync()
    secs = time.perf_counter() - start
    print(json.dumps({
        "train_samples_per_s": a.steps * a.batch / secs,
        "step_seconds": secs / a.steps,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": str(dev),
    }))


if __name__ == "__main__":
    main()
