#!/usr/bin/python3
"""A PyTorch data-parallel trainer for UCI Adult (census), run by trainflow.

Each replica is one process; trainflow tells it its role through the
environment (docs/applications.md): RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT for torch.distributed, AIP_CHECKPOINT_DIR to resume from,
AIP_MODEL_DIR for the artifact, CLOUD_ML_HP_METRIC_FILE for the metrics
(cloudml-hypertune's format). It trains a logistic regression over
standardized numeric and one-hot categorical columns with DDP (gloo),
checkpoints after every epoch (rank 0) and resumes from the newest
checkpoint when restarted.
"""
import argparse
import csv
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

NUMERIC = [0, 2, 4, 10, 11, 12]
CATEGORICAL = [1, 3, 5, 6, 7, 8, 9, 13]


def read(path, limit):
    rows = []
    with open(path) as f:
        for rec in csv.reader(f, skipinitialspace=True):
            if len(rec) != 15 or rec[0].startswith("|"):
                continue
            rows.append(rec)
            if limit and len(rows) >= limit:
                break
    return rows


def featurize(rows, vocab=None, stats=None):
    if vocab is None:
        vocab = [sorted({r[c] for r in rows}) for c in CATEGORICAL]
        index = [{v: i for i, v in enumerate(vs)} for vs in vocab]
    else:
        index = [{v: i for i, v in enumerate(vs)} for vs in vocab]
    num = torch.tensor([[float(r[c]) for c in NUMERIC] for r in rows])
    if stats is None:
        stats = (num.mean(0), num.std(0) + 1e-6)
    num = (num - stats[0]) / stats[1]
    parts = [num]
    for j, c in enumerate(CATEGORICAL):
        onehot = torch.zeros(len(rows), len(vocab[j]))
        for i, r in enumerate(rows):
            k = index[j].get(r[c])
            if k is not None:
                onehot[i, k] = 1.0
        parts.append(onehot)
    x = torch.cat(parts, 1)
    y = torch.tensor([1.0 if r[14].startswith(">50K") else 0.0 for r in rows])
    return x, y, vocab, stats


def report(metric_file, step, accuracy, loss):
    # cloudml-hypertune's format: one JSON object a line, values as strings.
    os.makedirs(os.path.dirname(metric_file), exist_ok=True)
    with open(metric_file, "a") as f:
        f.write(json.dumps({"global_step": str(step), "accuracy": str(accuracy), "loss": str(loss),
                            "timestamp": time.time(), "trial": os.environ.get("CLOUD_ML_TRIAL_ID", "")}) + "\n")


def main():
    ap = argparse.ArgumentParser()
    # The defaults are where the README's tutorial writes its data.
    ap.add_argument("--train-files", default="/tmp/census/adult.data")
    ap.add_argument("--eval-files", default="/tmp/census/adult.test")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--learning-rate", type=float, default=0.05)
    ap.add_argument("--rows", type=int, default=0, help="use only the first ROWS training rows (0: all)")
    args = ap.parse_args()
    torch.manual_seed(1)
    torch.set_num_threads(1)

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    with open(os.path.join(os.environ.get("HOME", "."), "pid"), "w") as f:
        f.write(str(os.getpid()))
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task = tf_config.get("task", {})
    print(f"replica {task.get('type')}-{task.get('index')}: rank {rank} of {world}", flush=True)
    if task.get("type") in ("ps", "evaluator"):
        return  # this trainer uses neither
    dist.init_process_group("gloo", rank=rank, world_size=world)

    x, y, vocab, stats = featurize(read(args.train_files, args.rows))
    xe, ye, _, _ = featurize(read(args.eval_files, 0), vocab, stats)
    shard = torch.arange(rank, len(x), world)  # every rank its own rows
    x, y = x[shard], y[shard]

    model = torch.nn.Linear(x.shape[1], 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.learning_rate)
    ckpt_dir = os.environ["AIP_CHECKPOINT_DIR"]
    start = 0
    ckpts = sorted((int(n.split("-")[1].split(".")[0]), n) for n in os.listdir(ckpt_dir) if n.startswith("epoch-"))
    if ckpts:
        start, name = ckpts[-1]
        state = torch.load(os.path.join(ckpt_dir, name))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        print(f"resumed from {name} (epoch {start})", flush=True)
    ddp = DDP(model)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    steps_per_epoch = (len(x) + args.batch_size - 1) // args.batch_size
    for epoch in range(start, args.epochs):
        g = torch.Generator().manual_seed(1000 + epoch)
        perm = torch.randperm(len(x), generator=g)
        for b in range(steps_per_epoch):
            idx = perm[b * args.batch_size:(b + 1) * args.batch_size]
            opt.zero_grad()
            loss = loss_fn(ddp(x[idx]).squeeze(1), y[idx])
            loss.backward()
            opt.step()
        with torch.no_grad():
            acc = ((model(xe).squeeze(1) > 0).float() == ye).float().mean().item()
        step = (epoch + 1) * steps_per_epoch
        print(f"epoch {epoch + 1} step {step} loss {loss.item():.4f} eval accuracy {acc:.4f}", flush=True)
        if rank == 0:
            tmp = os.path.join(ckpt_dir, f".epoch-{epoch + 1}.tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, tmp)
            os.replace(tmp, os.path.join(ckpt_dir, f"epoch-{epoch + 1}.pt"))
            report(os.environ["CLOUD_ML_HP_METRIC_FILE"], step, acc, loss.item())
        dist.barrier()  # every rank sees the checkpoint before the next epoch
    if rank == 0:
        torch.save({"model": model.state_dict(), "vocab": vocab, "mean": stats[0], "std": stats[1]},
                   os.path.join(os.environ["AIP_MODEL_DIR"], "model.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
