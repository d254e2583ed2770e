"""Optuna TPE on the test functions of bench/tuning/main.go, same JSON lines.

Usage: optuna_bench.py SEEDS BUDGET   (Debian python3-optuna 3.1)
"""
import json
import math
import sys
import time

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def branin(x):
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x[1] - b * x[0] ** 2 + c * x[0] - 6) ** 2 + 10 * (1 - t) * math.cos(x[0]) + 10


ALPHA = [1.0, 1.2, 3.0, 3.2]
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
     [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]


def hartmann6(x):
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j] * 1e-4) ** 2 for j in range(6))) for i in range(4))


PROBLEMS = [
    ("branin", [(-5, 10), (0, 15)], branin, 0.397887),
    ("hartmann6", [(0, 1)] * 6, hartmann6, -3.32237),
]


def main():
    seeds, budget = int(sys.argv[1]), int(sys.argv[2])
    for name, box, f, fmin in PROBLEMS:
        for seed in range(seeds):
            start = time.time()
            study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
            best, trials = math.inf, budget + 1
            for n in range(1, budget + 1):
                trial = study.ask()
                x = [trial.suggest_float("x%d" % i, lo, hi) for i, (lo, hi) in enumerate(box)]
                y = f(x)
                study.tell(trial, y)
                best = min(best, y)
                if best - fmin <= 0.01 * abs(fmin):
                    trials = n
                    break
            print(json.dumps({"problem": name, "search": "optuna_tpe", "seed": seed, "trials_to_1pct": trials,
                              "best": best, "secs": time.time() - start}), flush=True)


if __name__ == "__main__":
    main()
