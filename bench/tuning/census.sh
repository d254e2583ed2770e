#!/usr/bin/env bash
# bench/tuning/census.sh — tunes the census DNN on UCI Adult through real
# HyperparameterTuningJobs on the embedded stack (cli
# TestTuningCensusBench): wall time of 8 trials 1 vs 2 at a time, and the
# best adult.test accuracy within 30 trials. Usage: bench/tuning/census.sh
# [dir with adult.data and adult.test] (default /work/shared/datasets/census).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(realpath "${1:-/work/shared/datasets/census}")
TRAINFLOW_BENCH_TUNING_CENSUS="$dir" go test -count=1 -timeout 2h -run '^TestTuningCensusBench$' -v ./cli | grep -E 'tuning_bench_test|^(ok|FAIL|---)'
