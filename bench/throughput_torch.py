"""The plain PyTorch twin of `engram bench throughput`.

Same model (MLP 784-400-400-10, ReLU), optimiser (SGD lr 0.05, momentum 0.9), batch size and
synthetic data; each step slices a batch from a host tensor, moves it to the device, runs
forward, cross-entropy, backward and the optimiser step. Prints one JSON line:
{"train_samples_per_s": ..., "peak_rss_bytes": ..., ...}. `engram bench throughput` runs it (embedded in the binary, on
standard input) with `--threads N` for each thread count it compares, and `--device cuda` on a GPU.
"""
import argparse
import json
import resource
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: PyTorch's default)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 400), torch.nn.ReLU(),
        torch.nn.Linear(400, 400), torch.nn.ReLU(),
        torch.nn.Linear(400, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    pool = 16
    xs = torch.rand(pool * a.batch, 784) * 2 - 1
    ys = torch.randint(0, 10, (pool * a.batch,))
    loss_fn = torch.nn.CrossEntropyLoss()
    start = time.perf_counter()
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            sync()
            start = time.perf_counter()
        k = s % pool
        x = xs[k * a.batch:(k + 1) * a.batch].to(dev)
        y = ys[k * a.batch:(k + 1) * a.batch].to(dev)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
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
