#!/usr/bin/env bash
# Serving latency of a 32-instance DNN predict with the AVX2 kernels
# against the portable Go kernels (TRAINFLOW_KERNELS=generic), rounds
# interleaved in one run, compared with benchstat.
# Usage: bench/serve/kernels.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/serving.test" ./serving/
for _ in $(seq "$rounds"); do
	for k in avx2 generic; do
		TRAINFLOW_KERNELS=$k "$tmp/serving.test" -test.run '^$' -test.bench BenchmarkPredictDNN -test.count 1 |
			sed -n 's/^BenchmarkPredictDNN\/kernels=[a-z0-9]*\//BenchmarkPredictDNN\//p' >>"$tmp/$k.txt"
	done
done
go run golang.org/x/perf/cmd/benchstat@latest avx2="$tmp/avx2.txt" generic="$tmp/generic.txt" 2>/dev/null ||
	{ echo "benchstat unavailable; raw:"; head -100 "$tmp"/*.txt; }
