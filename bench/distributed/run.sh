#!/usr/bin/env bash
# bench/distributed: training examples/s of the Fashion-MNIST DNN
# (784-128-64-10, Adam, batch 128) on one goroutine (local, the baseline)
# and on parameter servers + workers over loopback gRPC in one process:
# async and sync, 1 and 2 workers, 1 and 2 parameter servers. Rounds are
# interleaved by -count; the scaling ratios come from the same run.
# Usage: bench/distributed/run.sh [count] [steps per run]
set -euo pipefail
cd "$(dirname "$0")/../.."
count=${1:-5}
steps=${2:-400}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench FashionMLP -benchtime "${steps}x" -count "$count" ./train/dist | tee "$out"
# Median examples/s per configuration and the ratios that matter.
awk '/^BenchmarkFashionMLP/ {
	name=$1; sub(/-[0-9]+$/, "", name); sub(/BenchmarkFashionMLP\//, "", name)
	for (i = 2; i < NF; i++) if ($(i+1) == "examples/s") v[name] = v[name] " " $i
}
END {
	for (n in v) { k = split(v[n], a, " "); asort(a); med[n] = a[int((k+1)/2)]; printf "%-22s median %8.0f examples/s over %d runs\n", n, med[n], k }
	one = med["async/workers=1/ps=1"]
	printf "scaling, 2 workers vs 1 (async, 1 ps): %.2fx\n", med["async/workers=2/ps=1"] / one
	printf "scaling, 2 workers vs 1 (sync, 1 ps):  %.2fx\n", med["sync/workers=2/ps=1"] / one
	printf "1 worker + 1 ps vs local:              %.2fx\n", one / med["local"]
}' "$out"
# Time to the training-engine bar (test accuracy 0.865), local vs clusters.
TRAINFLOW_BENCH_ACCURACY=1 go test -count=1 -run TestTimeToAccuracy -v -timeout 30m ./train/dist | grep -E 'reached|ok|FAIL'
