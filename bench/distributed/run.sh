#!/usr/bin/env bash
# bench/distributed: training examples/s of the Fashion-MNIST DNN
# (784-128-64-10, Adam, batch 128, float32 passes as jobs train it) on one goroutine (local, the baseline,
# gathering batches of shuffled rows as the workers do; local/threads=1: the
# same on one thread, GOMAXPROCS=1)
# and on parameter servers + workers over loopback gRPC in one process:
# async and sync, 1 and 2 workers, 1 and 2 parameter servers, pushing every
# step's gradient or (/local=8) local SGD, a parameter delta every 8 local
# steps (cluster.local_steps), with (/overlap) or without the rounds'
# push and pull overlapping the next round. Rounds are interleaved (each runs every
# configuration once); the scaling ratios come from the same run.
# Usage: bench/distributed/run.sh [count] [steps per run]
# Environment: BIN, train/dist's test binary built beforehand (go test -c
# ./train/dist), for a machine without Go; TRAINFLOW_FASHION_DIR, the
# Fashion-MNIST IDX files where Debian's package is not installed. Run it
# under taskset -c 0,1 for the two-core figures on a larger machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
count=${1:-5}
steps=${2:-400}
out=$(mktemp)
bin=$(mktemp)
trap 'rm -f "$out" "$bin"' EXIT
if [ -n "${BIN:-}" ]; then
	cp "$BIN" "$bin"
	chmod +x "$bin"
else
	go test -c -o "$bin" ./train/dist
fi
# One round runs every configuration once; -count would run each one
# count times in a row, so a change of load between them would skew the
# ratios.
for r in $(seq "$count"); do
	echo "round $r: load average $(cut -d' ' -f1-3 /proc/loadavg)"
	(cd train/dist && "$bin" -test.run '^$' -test.bench FashionMLP -test.benchtime "${steps}x" -test.count 1) | tee -a "$out"
done
# Median examples/s per configuration and the ratios that matter.
med() { # med NAME [UNIT]: median examples/s (or UNIT) of the configuration
	awk -v n="$1" -v u="${2:-examples/s}" '$1 ~ "^BenchmarkFashionMLP/"n"-[0-9]+$" { for (i = 2; i < NF; i++) if ($(i+1) == u) print $i }' "$out" |
		sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR+1)/2)]; else print 0 }'
}
echo "load average before the summary: $(cut -d' ' -f1-3 /proc/loadavg)"
local=$(med local)
for c in local local/threads=1 async/workers=1/ps=1 async/workers=2/ps=1 sync/workers=2/ps=1 async/workers=2/ps=2 sync/workers=2/ps=2 \
	async/workers=1/ps=1/local=8 async/workers=2/ps=1/local=8 sync/workers=2/ps=1/local=8 \
	async/workers=1/ps=1/local=8/overlap async/workers=2/ps=1/local=8/overlap; do
	printf '%-30s median %8.0f examples/s %6.1f CPU µs/example\n' "$c" "$(med "$c")" "$(med "$c" cpu-µs/example)"
done
one=$(med async/workers=1/ps=1)
awk -v l="$local" -v l1="$(med local/threads=1)" -v o="$one" -v a1="$(med async/workers=2/ps=1)" -v s1="$(med sync/workers=2/ps=1)" -v a2="$(med async/workers=2/ps=2)" -v s2="$(med sync/workers=2/ps=2)" \
	-v lo="$(med async/workers=1/ps=1/local=8)" -v la="$(med async/workers=2/ps=1/local=8)" -v ls="$(med sync/workers=2/ps=1/local=8)" \
	-v oo="$(med async/workers=1/ps=1/local=8/overlap)" -v oa="$(med async/workers=2/ps=1/local=8/overlap)" 'BEGIN {
	best = (l > l1 ? l : l1)
	printf "2 workers vs 1 (same cluster code): async 1 ps %.2fx, sync 1 ps %.2fx, async 2 ps %.2fx, sync 2 ps %.2fx\n", a1/o, s1/o, a2/o, s2/o
	printf "1 worker + 1 ps vs local: %.2fx; best 2-worker cluster vs local: %.2fx\n", o/l, (a2 > s2 ? a2 : s2)/l
	printf "local SGD (local=8): 1 worker + 1 ps vs local %.2fx; 2 workers async %.2fx, sync %.2fx of local, %.2fx, %.2fx of local/threads=1\n", lo/l, la/l, ls/l, la/l1, ls/l1
	printf "local SGD with overlapped rounds (local=8/overlap): 1 worker + 1 ps vs local %.2fx; 2 workers async %.2fx of local, %.2fx of local/threads=1\n", oo/l, oa/l, oa/l1
	b2 = a1; if (s1 > b2) b2 = s1; if (a2 > b2) b2 = a2; if (s2 > b2) b2 = s2; if (la > b2) b2 = la; if (ls > b2) b2 = ls; if (oa > b2) b2 = oa
	printf "best 2-worker cluster vs best single process (local or local/threads=1): %.2fx\n", b2/best
	# Two workers on two cores compute on one core each (train.Training),
	# so they reach at most twice local/threads=1: against the best single
	# process, that ceiling is 2·l1/best (1.25x once local runs at 1.6x its
	# one thread). The scaling efficiency is the share of it reached.
	printf "2-worker scaling efficiency (best 2-worker cluster / (2 x local/threads=1)): %.2f; the ceiling of best 2-worker vs best single on these cores: %.2fx\n", b2/(2*l1), 2*l1/best
}'
# Time to the training-engine bar (test accuracy 0.865), local vs clusters.
# Each cluster's line gives its time as a multiple of local's.
(cd train/dist && TRAINFLOW_BENCH_ACCURACY=1 "$bin" -test.run TestTimeToAccuracy -test.v -test.timeout 30m) | grep -E 'reached|PASS|FAIL'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
