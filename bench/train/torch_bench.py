"""PyTorch training throughput (--threads, default 1) for the two models of
trainflow's training benchmark (issue #4), to compare with
`go test -bench` in the same run.

  mlp:    Fashion-MNIST 784-128-64-10 MLP, ReLU, Adam lr 1e-3, batch 128
  linear: census logistic regression on DIM features, Adam lr 3e-3, batch 64

Each training step gathers a shuffled batch from the in-memory set, as
trainflow's loop does. Prints one line per model:
  torch <model> batch=<b> examples/s=<float>
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch


def fashion(path):
    with gzip.open(os.path.join(path, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(path, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.tensor(x, dtype=torch.float32) / 255, torch.tensor(y, dtype=torch.long)


def throughput(model, loss_fn, x, y, batch, lr, seconds):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n = x.shape[0]
    g = torch.Generator().manual_seed(1)

    def epoch(limit):
        perm = torch.randperm(n, generator=g)
        done = 0
        for lo in range(0, n - batch + 1, batch):
            idx = perm[lo:lo + batch]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss_fn(model(xb), yb).backward()
            opt.step()
            done += batch
            if done >= limit:
                break
        return done

    epoch(20 * batch)  # warm up
    start, done = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        done += epoch(n)
    return done / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--census-dim", type=int, default=115)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mlp-only", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)

    if os.path.exists(os.path.join(a.fashion, "train-images-idx3-ubyte.gz")):
        x, y = fashion(a.fashion)
    else:
        x, y = torch.rand(60000, 784), torch.randint(0, 10, (60000,))
    for _ in range(a.count):
        mlp = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64),
                                  torch.nn.ReLU(), torch.nn.Linear(64, 10))
        r = throughput(mlp, torch.nn.CrossEntropyLoss(), x, y, 128, 1e-3, a.seconds)
        print(f"torch mlp batch=128 examples/s={r:.0f} threads={a.threads}", flush=True)
    if a.mlp_only:
        return

    # Census-shaped data: one-hot blocks plus a few standardised numerics;
    # a dense linear layer's speed does not depend on the values.
    n, d = 32561, a.census_dim
    xc = torch.zeros(n, d)
    xc[:, :6] = torch.randn(n, 6)
    xc[torch.arange(n).unsqueeze(1), torch.randint(6, d, (n, 8))] = 1
    yc = torch.randint(0, 2, (n,)).float()
    for _ in range(a.count):
        lin = torch.nn.Linear(d, 1)
        bce = torch.nn.BCEWithLogitsLoss()
        r = throughput(lin, lambda z, t: bce(z.squeeze(1), t), xc, yc, 64, 3e-3, a.seconds)
        print(f"torch linear batch=64 examples/s={r:.0f}", flush=True)


if __name__ == "__main__":
    main()
