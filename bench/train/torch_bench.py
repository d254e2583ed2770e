"""PyTorch training throughput (--threads, default 1) for the models of
trainflow's training benchmark (issues #4 and #28), to compare with
`go test -bench` in the same run.

  mlp:          Fashion-MNIST 784-128-64-10 MLP, ReLU, Adam lr 1e-3, batch 128
  linear:       census logistic regression on DIM features, Adam lr 3e-3, batch 64
  cnn fashion:  the fashion_mnist_cnn preset (jobspec.FashionCNN): conv 32 3x3
                same ReLU, max pool 2, conv 64 3x3 same ReLU, max pool 2,
                dense 128 ReLU, dropout 0.25, dense 10; Adam lr 1e-3, batch 64
  cnn tutorial: the mnist_cnn preset (jobspec.TutorialCNN): the same with
                valid padding, batch 128

--models picks them (default mlp,linear; --mlp-only is --models mlp).
Images are 1x28x28 (NCHW, torch's native layout; trainflow's is NHWC).
Each training step gathers a shuffled batch from the in-memory set, as
trainflow's loop does. Prints one line per model:
  torch <model> batch=<b> examples/s=<float> threads=<n>
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

    def epoch(limit, deadline):
        perm = torch.randperm(n, generator=g)
        done = 0
        for lo in range(0, n - batch + 1, batch):
            idx = perm[lo:lo + batch]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss_fn(model(xb), yb).backward()
            opt.step()
            done += batch
            if done >= limit or time.perf_counter() >= deadline:
                break
        return done

    epoch(20 * batch, float("inf"))  # warm up
    start, done = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:  # an epoch of the CNNs takes minutes
        done += epoch(n, start + seconds)
    return done / (time.perf_counter() - start)


def cnn(pad):
    """The CNN presets: pad 1 is "same" for 3x3 kernels (fashion), 0 "valid" (tutorial)."""
    side = 7 if pad else 5  # 28 → 28|26 → 14|13 → 14|11 → 7|5
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=pad), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=pad), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * side * side, 128), torch.nn.ReLU(),
        torch.nn.Dropout(0.25), torch.nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--census-dim", type=int, default=115)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="mlp,linear", help="comma-separated: mlp, linear, cnn")
    ap.add_argument("--mlp-only", action="store_true", help="same as --models mlp")
    a = ap.parse_args()
    models = {"mlp"} if a.mlp_only else set(a.models.split(","))
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)

    if os.path.exists(os.path.join(a.fashion, "train-images-idx3-ubyte.gz")):
        x, y = fashion(a.fashion)
    else:
        x, y = torch.rand(60000, 784), torch.randint(0, 10, (60000,))
    for _ in range(a.count if "mlp" in models else 0):
        mlp = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64),
                                  torch.nn.ReLU(), torch.nn.Linear(64, 10))
        r = throughput(mlp, torch.nn.CrossEntropyLoss(), x, y, 128, 1e-3, a.seconds)
        print(f"torch mlp batch=128 examples/s={r:.0f} threads={a.threads}", flush=True)
    for _ in range(a.count if "cnn" in models else 0):
        xi = x.view(-1, 1, 28, 28)
        for name, pad, batch in (("fashion", 1, 64), ("tutorial", 0, 128)):
            r = throughput(cnn(pad), torch.nn.CrossEntropyLoss(), xi, y, batch, 1e-3, a.seconds)
            print(f"torch cnn {name} batch={batch} examples/s={r:.0f} threads={a.threads}", flush=True)
    if "linear" not in models:
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
