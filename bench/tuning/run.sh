#!/usr/bin/env bash
# bench/tuning/run.sh — trials needed to come within 1% of the known
# optimum of Branin (2-D) and Hartmann-6 (6-D), median over seeds, for
# trainflow's Bayesian search (GP, Matérn 5/2, EI), its random search and
# Optuna's TPE sampler (Debian python3-optuna 3.1), one trial at a time, in
# one run. A run that never gets there within the budget counts budget+1.
# Usage: bench/tuning/run.sh [seeds] [budget]   (default 10 100; OUT=dir
# keeps the raw JSON lines).
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds=${1:-10}
budget=${2:-100}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
python=/usr/bin/python3 # Debian's, where python3-optuna lives
go build -o "$out/tuning-bench" ./bench/tuning
GOMAXPROCS=1 "$out/tuning-bench" -seeds "$seeds" -budget "$budget" >"$out/results.jsonl"
if "$python" -c 'import optuna' 2>/dev/null; then
	"$python" bench/tuning/optuna_bench.py "$seeds" "$budget" >>"$out/results.jsonl"
else
	echo "python3-optuna not installed: skipping Optuna TPE" >&2
fi
"$python" - "$out/results.jsonl" "$budget" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
budget = int(sys.argv[2])
by = {}
for r in rows:
    by.setdefault((r["problem"], r["search"]), []).append(r)
print("%-10s %-11s %8s %8s %9s %8s" % ("problem", "search", "median", "reached", "best(med)", "secs/run"))
for (p, s), rs in sorted(by.items()):
    t = statistics.median(r["trials_to_1pct"] for r in rs)
    reached = sum(r["trials_to_1pct"] <= budget for r in rs)
    print("%-10s %-11s %8s %5d/%-2d %9.4f %8.2f" % (p, s, t if t <= budget else ">%d" % budget, reached, len(rs),
          statistics.median(r["best"] for r in rs), statistics.mean(r["secs"] for r in rs)))
PY
echo "raw results: $out/results.jsonl"
