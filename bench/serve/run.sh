#!/usr/bin/env bash
# bench/serve: train the census model through the real stack (trainflow dev
# --demo), then measure the prediction server against a bare net/http
# handler in one process. Usage: bench/serve/run.sh [extra flags for main.go]
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/trainflow" ./cmd/trainflow
"$work/trainflow" dev --demo --exit --home "$work/home" --temporal 127.0.0.1:0 --ui "" --http 127.0.0.1:0 >/dev/null
go run ./bench/serve --models "$work/home/models" "$@"
