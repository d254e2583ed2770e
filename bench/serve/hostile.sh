#!/usr/bin/env bash
# bench/serve/hostile.sh: train the census model through the real stack
# (trainflow dev --demo), serve it with `trainflow serve`, and measure the
# server's RSS while 4 clients send 1.3 MB attack bodies (issue 13). With
# BASE=<git revision>, the same run against that revision's binary first,
# for comparison. Usage: bench/serve/hostile.sh [extra flags for hostile/main.go]
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/trainflow" ./cmd/trainflow
go build -o "$work/hostile" ./bench/serve/hostile
"$work/trainflow" dev --demo --exit --home "$work/home" --temporal 127.0.0.1:0 --ui "" --http 127.0.0.1:0 >/dev/null

measure() { # binary label
	local port=$((28000 + RANDOM % 1000))
	"$1" serve --models "$work/home/models" --http "127.0.0.1:$port" --log-level error 2>"$work/$2.log" &
	local pid=$!
	pids+=("$pid")
	for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/v2/health/live" >/dev/null && break; sleep 0.1; done
	echo -n "$2: "
	"$work/hostile" --url "http://127.0.0.1:$port" --pid "$pid" "${@:3}"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}
if [[ -n "${BASE:-}" ]]; then
	mkdir "$work/base"
	git archive "$BASE" | tar -x -C "$work/base"
	(cd "$work/base" && go build -o "$work/trainflow-base" ./cmd/trainflow)
	measure "$work/trainflow-base" "base $BASE" "$@"
fi
measure "$work/trainflow" "this tree" "$@"
