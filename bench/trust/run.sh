#!/usr/bin/env bash
# The cost of signed activity results and worker tokens on the default job:
# interleaved runs of the census preset (3,000 steps, generated rows) on a
# dev stack of OLD (a trainflow binary built before signing) and NEW (this
# tree's), each job's wall time read from Temporal (start_time to end_time of `jobs describe`), and
# the ratio of the medians. Usage:
#   bench/trust/run.sh OLD_BINARY [ROUNDS]   (NEW is built from this tree)
# Prints one line per run and a summary; exits non-zero if a job fails.
set -euo pipefail
old=${1:?usage: bench/trust/run.sh OLD_BINARY [ROUNDS]}
rounds=${2:-3}
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/new" ./cmd/trainflow
declare -A times
for r in $(seq 1 "$rounds"); do
	for which in old new; do
		bin=$old
		[ "$which" = new ] && bin=$work/new
		home=$work/$which-$r
		port=$((20000 + RANDOM % 10000))
		http=$((port + 1))
		"$bin" dev --home "$home" --temporal "127.0.0.1:$port" --ui "" --http "127.0.0.1:$http" --log-level error >"$work/dev.log" 2>&1 &
		dev=$!
		for _ in $(seq 1 300); do # the prediction server starts last, after the worker
			curl -fsS "http://127.0.0.1:$http/v2/health/ready" >/dev/null 2>&1 && break
			sleep 0.2 # polling the stack's readiness
		done
		id=census_${which}_$r
		# The stack's own home: a new binary presents its user token.
		export TRAINFLOW_HOME=$home
		"$bin" jobs submit training "$id" --temporal "127.0.0.1:$port" --wait >"$work/$id.out" 2>&1 || { cat "$work/$id.out"; exit 1; }
		secs=$("$bin" jobs describe "$id" --temporal "127.0.0.1:$port" --output json | /usr/bin/python3 -c '
import json, sys, datetime
d = json.load(sys.stdin)
p = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
print("%.2f" % (p(d["end_time"]) - p(d["start_time"])).total_seconds())')
		echo "round $r $which $secs s"
		times[$which]+="$secs "
		kill "$dev"; wait "$dev" 2>/dev/null || true
	done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mo=$(echo "${times[old]}" | median)
mn=$(echo "${times[new]}" | median)
echo "median old ${mo} s, new ${mn} s, new/old $(awk -v a="$mn" -v b="$mo" 'BEGIN{printf "%.3f", a/b}')"
