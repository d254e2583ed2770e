#!/usr/bin/env bash
# bench/distributed/many-cores.sh: issue #30's figures on a machine with
# many cores and no Go (the device machine of RESULTS.md's "Figures on a
# 16-core machine"), in two steps:
#
#   bench/distributed/many-cores.sh prepare   # here: builds the binaries into
#                                             # .dev/ (xz, to keep the tree small)
#                                             # and copies Fashion-MNIST there
#   bench/distributed/many-cores.sh run       # there, from the repository root:
#                                             # writes its outputs to $OUT (or /tmp/out)
#
# run: (1) workers 1/2/4/8 as separate processes, each pinned to a core
# (netns/run.sh; NETNS=0 where the image has no ip/tc), local SGD and
# gradients, the local loop on 1–16 threads; (2) time to 0.865 test
# accuracy with 1/2/4/8 workers; (3) #30's two-core figures under
# taskset -c 0,1: the MLP step at 1 and 2 threads, the GEMM beside the FMA
# peak, bench/distributed/run.sh. About 6 minutes on 16 cores (the sum of
# its parts as timed on the machine of netns/RESULTS.md; not yet run as one).
# Environment: ROUNDS (default 3), STEPS (global steps of (1), default
# 1200), WORKERS (default "1 2 4 8").
set -uo pipefail
cd "$(dirname "$0")/../.."
d=.dev
case "${1:-}" in
prepare)
	set -e
	mkdir -p "$d/fashion"
	ex=$(git rev-parse --git-path info/exclude)
	mkdir -p "$(dirname "$ex")"
	grep -qx '/.dev/' "$ex" 2>/dev/null || echo /.dev/ >>"$ex"
	CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$d/node" ./train/dist
	CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$d/train.test" ./train
	CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$d/gemm.test" ./train/internal/kernel
	xz -f -T2 "$d/node" "$d/train.test" "$d/gemm.test"
	cp /usr/share/datasets/fashion-mnist/*.gz "$d/fashion/" 2>/dev/null || echo "no Fashion-MNIST here: (2) will skip" >&2
	du -sh "$d"
	exit 0
	;;
run) ;;
*)
	echo "usage: $0 prepare|run" >&2
	exit 2
	;;
esac
o=${OUT:-/tmp/out}
mkdir -p "$o"
export PATH=$PATH:/usr/sbin:/sbin
for f in node train.test gemm.test; do
	xz -dc "$d/$f.xz" >"/tmp/$f" && chmod +x "/tmp/$f" || { echo "$d/$f.xz: run '$0 prepare' first" >&2; exit 1; }
done
{
	date -u
	echo "nproc $(nproc)"
	lscpu | grep -E 'Model name|Thread|Core|Socket|L2|L3'
	cat /proc/loadavg
} | tee "$o/machine.txt"
netns=0
if ip netns add tfprobe 2>/dev/null && ip -n tfprobe link add name eth0 type veth peer name tfp0 2>/dev/null &&
	tc -n tfprobe qdisc add dev eth0 root tbf rate 10gbit burst 64kb limit 4mb 2>/dev/null; then netns=1; fi
ip netns del tfprobe 2>/dev/null
echo "namespaces: $netns (0: loopback, NETNS=0)" | tee -a "$o/machine.txt"
rounds=${ROUNDS:-3}
echo "== (1) workers ${WORKERS:-1 2 4 8}, local loop 1-16 threads"
NETNS=$netns NODE=/tmp/node WORKERS="${WORKERS:-1 2 4 8}" PS=2 MODES="async-local8-overlap sync-local8 async" \
	LOCAL_THREADS="1 2 4 8 16" DATA=/nonexistent KEEP=$o/lines.jsonl \
	timeout 360 bench/distributed/netns/run.sh "$rounds" "${STEPS:-1200}" >"$o/cluster.txt" 2>&1
tail -22 "$o/cluster.txt"
echo "== (2) time to 0.865"
TRAINFLOW_BENCH_ACCURACY=1 TRAINFLOW_BENCH_WORKERS="${WORKERS:-1 2 4 8}" TRAINFLOW_BENCH_PS=2 TRAINFLOW_FASHION_DIR=$PWD/$d/fashion \
	timeout 200 /tmp/node -test.run TestTimeToAccuracy -test.v -test.timeout 5m 2>&1 | grep -E 'reached|SKIP|FAIL|ok' | tee "$o/tta.txt"
echo "== (3) two cores (taskset -c 0,1)"
export TRAINFLOW_FASHION_DIR=$PWD/$d/fashion
T="taskset -c 0,1"
for r in $(seq "$rounds"); do
	(cd train && GOMAXPROCS=1 $T /tmp/train.test -test.run '^$' -test.bench 'TrainMLP/float32/batch=128$' -test.benchtime 3s) >>"$o/mlp1.txt" 2>&1
	(cd train && GOMAXPROCS=2 $T /tmp/train.test -test.run '^$' -test.bench 'TrainMLP/float32/batch=128$' -test.benchtime 3s) >>"$o/mlp2.txt" 2>&1
	(cd train/internal/kernel && GOMAXPROCS=1 $T /tmp/gemm.test -test.run '^$' -test.bench 'FMAPeak|Sgemm/./x/impl=avx2' -test.benchtime 1s) >>"$o/gemm.txt" 2>&1
done
grep -h 'examples/s' "$o/mlp1.txt" "$o/mlp2.txt" | awk '{ for (i = 2; i < NF; i++) if ($(i+1) == "examples/s") print $1, $i }'
BIN=/tmp/node $T timeout 240 bench/distributed/run.sh "$rounds" 400 >"$o/dist.txt" 2>&1
grep -E 'median|[0-9]x($|,)|reached' "$o/dist.txt"
date -u
