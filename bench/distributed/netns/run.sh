#!/usr/bin/env bash
# bench/distributed/netns: the Fashion-MNIST DNN of bench/distributed
# (784-128-64-10, Adam 1e-3, batch 128, float32 passes and wire) with every
# parameter server and worker a separate process in a network namespace of
# its own, joined by veth pairs to a bridge, each link shaped with netem.
# Multi-host evidence without multiple hosts (issue #30). See RESULTS.md.
#
# Usage (as root): bench/distributed/netns/run.sh [rounds] [global steps]
#
# Environment:
#   CONFIGS  clusters as WORKERSxPS (default "1x1 2x1 2x2")
#   WORKERS  instead of CONFIGS: worker counts, each with PS parameter servers
#            (default PS=1), e.g. WORKERS="1 2 4 8" PS=2 on a 16-core machine
#   MODES    "async sync" (default both; async runs with Overlap as the bench);
#            add "async-no-overlap" for async as jobs run it now (Overlap off),
#            "async-local8" / "sync-local8" for local SGD (cluster.local_steps 8),
#            "async-local8-overlap" with each round's exchange beside the next
#            round's steps (BenchmarkFashionMLP's local=8/overlap)
#   RTT_MS   round trip between two nodes, ms (default 0.1)
#   RATE     every node's link rate each way, a tc rate (default 10gbit)
#   CPUS     CPU ids to pin to (default all online CPUs); PIN=0: no pinning
#   CORES    CPUs per process when pinned (default 1; 2 gives a worker's gRPC
#            goroutines a core beside its gradient, on a machine with room)
#   PROFILE  a path prefix: CPU profiles PROFILE-worker.pprof and PROFILE-ps.pprof
#            of the first async 1-worker run (go tool pprof -top FILE)
#   DATA     Fashion-MNIST IDX directory (default $TRAINFLOW_FASHION_DIR, else
#            Debian's; generated rows if unreadable)
#   NODE     a node binary built beforehand (go test -c ./train/dist), for a
#            machine without Go; default: build it
#   NETNS=0  no namespaces and no shaping: every node in this namespace over
#            loopback (ps k on 127.0.0.1:7070+k), pinned as above; for a
#            machine whose kernel or tools lack netns, veth, bridge or tc
#            (net_tx/net_rx then count this namespace's other interfaces)
#   LOCAL_THREADS  thread counts of the local baseline (default 1): each T
#            runs the local loop pinned to T CPUs (GOMAXPROCS T), named
#            local (T = 1) or local/threads=T (the best of them is the best
#            single process; vs_local stays against local)
#
# Topology: namespace <p>-br holds bridge br0; node k is namespace <p>-k with
# eth0 = 10.77.0.(k+1)/24, its veth peer pk enslaved to br0. Each packet
# leaves through two netem qdiscs (the sender's eth0, then the bridge port
# towards the receiver), each with delay RTT/4 and the link rate: one way
# RTT/2, every node's send and receive each limited to RATE, as a switch
# with full-duplex links. The local baseline runs in a namespace of its own
# with only lo. The root namespace is not touched.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-3}
steps=${2:-300}
netns=${NETNS:-1}
[ "$netns" = 0 ] || [ "$(id -u)" = 0 ] || { echo "run.sh: needs root (ip netns, tc); NETNS=0 runs over loopback without" >&2; exit 1; }
modes=${MODES:-async sync}
if [ -n "${WORKERS:-}" ]; then
	configs=""
	for w in $WORKERS; do configs="$configs ${w}x${PS:-1}"; done
else
	configs=${CONFIGS:-1x1 2x1 2x2}
fi
rtt=${RTT_MS:-0.1}
rate=${RATE:-10gbit}
cores=${CORES:-1}
delay_us=$(awk -v r="$rtt" 'BEGIN { printf "%.1f", r * 1000 / 4 }')
if [ -n "${CPUS:-}" ]; then read -r -a cpus <<<"${CPUS//,/ }"; else mapfile -t cpus < <(seq 0 $(($(nproc --all) - 1))); fi
all_cpus=$(IFS=,; echo "${cpus[*]}")
data=() # the node's -data; unset DATA leaves the node's default (train/dist's fashionData)
if [ -n "${DATA:-}" ]; then data=(-data "$DATA"); fi

p=tfn$$
work=$(mktemp -d /tmp/tfnetns.XXXXXX)
cleanup() {
	local rc=$?
	for pid in $(jobs -p); do kill "$pid" 2>/dev/null || true; done # the nodes still running
	wait 2>/dev/null || true
	[ "$netns" = 0 ] || for ns in $(ip netns list | awk -v p="$p-" 'index($1, p) == 1 { print $1 }'); do ip netns del "$ns" || true; done
	rm -rf "$work"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${NODE:-}" ]; then
	cp "$NODE" "$work/node"
else
	echo "building the node (train/dist's test binary)..."
	go test -c -o "$work/node" ./train/dist
fi

# Namespaces: workers in nodes 0..maxw-1, parameter servers after them.
maxw=0 maxp=0
for c in $configs; do
	w=${c%x*} s=${c#*x}
	if ((w > maxw)); then maxw=$w; fi
	if ((s > maxp)); then maxp=$s; fi
done
nodes=$((maxw + maxp))
# shape NS DEV: the qdisc of one egress. netem where the kernel has it
# (sch_netem); otherwise (this machine's VM kernel has no netem, fq or
# etf: nothing in the kernel can delay packets) tbf limits the rate
# alone, with a burst of 0.1 ms at the rate (at least 64 KiB, one GSO
# packet) and a 4 MiB queue, and no delay is added: the RTT is the
# veths' and the bridge's own, which each worker measures (ping_us).
qdisc=""
shape() {
	if [ -z "$qdisc" ]; then
		if tc -n "$1" qdisc add dev "$2" root netem delay "${delay_us}us" rate "$rate" 2>/dev/null; then
			qdisc=netem
			return
		fi
		qdisc=tbf
		echo "NOTE: this kernel has no sch_netem: links limited to $rate by tbf, NO delay added (RTT_MS=$rtt ignored)" >&2
	fi
	if [ "$qdisc" = netem ]; then
		tc -n "$1" qdisc add dev "$2" root netem delay "${delay_us}us" rate "$rate"
	else
		tc -n "$1" qdisc add dev "$2" root tbf rate "$rate" burst "$burst" limit 4mb
	fi
}
if [ "$netns" != 0 ]; then
	ip netns add "$p-br"
	ip -n "$p-br" link add name br0 type bridge
	ip -n "$p-br" link set br0 up
	ip -n "$p-br" link set lo up
	burst=$(tc -n "$p-br" qdisc add dev br0 root tbf rate "$rate" burst 64kb limit 4mb 2>/dev/null; tc -n "$p-br" -j qdisc show dev br0 |
		jq -r '.[0].options.rate // empty' 2>/dev/null || true)
	tc -n "$p-br" qdisc del dev br0 root 2>/dev/null || true
	burst=$(awk -v r="${burst:-0}" 'BEGIN { b = r * 1e-4; if (b < 65536) b = 65536; printf "%db", b }')
	for ((k = 0; k < nodes; k++)); do
		ns=$p-$k
		ip netns add "$ns"
		ip -n "$ns" link set lo up
		ip -n "$ns" link add name eth0 type veth peer name "p$k" netns "$p-br"
		ip -n "$ns" addr add "10.77.0.$((k + 1))/24" dev eth0
		ip -n "$ns" link set eth0 up
		ip -n "$p-br" link set "p$k" master br0 up
		shape "$ns" eth0
		shape "$p-br" "p$k"
	done
	ip netns add "$p-local"
	ip -n "$p-local" link set lo up
	shaping=$(tc -n "$p-0" qdisc show dev eth0 | head -1)
fi

echo "date:      $(date -u +%FT%TZ)  host $(hostname)  $(nproc) CPUs  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "load:      $(uptime)"
if [ "$netns" = 0 ]; then
	echo "shaping:   none: every node in this namespace over loopback (NETNS=0)"
elif [ "$qdisc" = netem ]; then
	echo "shaping:   every egress (node eth0 and bridge port): ${shaping#qdisc }  => RTT ${rtt} ms, ${rate} each way per node"
else
	echo "shaping:   every egress (node eth0 and bridge port): ${shaping#qdisc }  => ${rate} each way per node, no added delay (no netem in this kernel)"
fi
echo "runs:      $rounds interleaved rounds x $steps global steps; configs: local $configs; modes: $modes; CPUs ${all_cpus}; ${cores} per pinned process"

# cpuset I N: the CPUs of the I-th process of a run of N processes: CORES
# of its own when the run's processes fit the CPUs (GOMAXPROCS follows the
# affinity), otherwise all of them (the processes share the cores, as
# processes on one host would).

cpuset() {
	local i=$1 n=$2
	if [ "${PIN:-1}" = 0 ] || ((n * cores > ${#cpus[@]})); then
		echo "$all_cpus"
	else
		(IFS=,; echo "${cpus[*]:i*cores:cores}")
	fi
}
echo "pinning local: $(cpuset 0 1)${LOCAL_THREADS:+ (local/threads=T: the first T CPUs)}"
results=$work/results.jsonl
: >"$results"
node() { # node NS CPUSET ARGS... &: the node binary in namespace NS pinned to CPUSET, as this (background) subshell, so $! is its pid
	local ns=$1 set=$2
	shift 2
	if [ "$netns" = 0 ]; then
		TRAINFLOW_DIST_NODE=1 exec taskset -c "$set" "$work/node" "${data[@]}" -timeout 10m "$@"
	fi
	TRAINFLOW_DIST_NODE=1 exec ip netns exec "$ns" taskset -c "$set" "$work/node" "${data[@]}" -timeout 10m "$@"
}
ps_addr() { # ps_addr K: where parameter server K listens
	if [ "$netns" = 0 ]; then echo "127.0.0.1:$((7070 + $1))"; else echo "10.77.0.$((maxw + $1 + 1)):7070"; fi
}
profiled=""
run_cluster() { # run_cluster ROUND MODE WORKERS PS
	local round=$1 mode=$2 w=$3 s=$4 name="$2/${3}w${4}ps" n=$(($3 + $4))
	local dir=$work/run-$round-$mode-$w-$s
	mkdir -p "$dir/secrets" "$dir/ck"
	local common=(-workers "$w" -tasks "$s" -steps "$steps" -secrets "$dir/secrets" -config "$name" -round "$round")
	case $mode in
	sync) common+=(-sync) ;;
	async) ;;
	async-no-overlap) common+=(-overlap=false) ;;
	async-local*-overlap) k=${mode#async-local} && common+=(-local="${k%-overlap}" -local-overlap) ;; # rounds overlap their exchange
	async-local*) common+=(-local="${mode#async-local}") ;; # local SGD: cluster.local_steps
	sync-local*) common+=(-sync -local="${mode#sync-local}") ;;
	*) echo "run.sh: mode $mode: want async, sync, async-no-overlap, async-localK, async-localK-overlap or sync-localK" >&2; exit 1 ;;
	esac
	local addrs="" ps_pids=() w_pids=() k j prof=""
	if [ -n "${PROFILE:-}" ] && [ -z "$profiled" ] && [ "$mode" = async ] && [ "$w" = 1 ]; then
		prof=$PROFILE
		profiled=1
	fi
	for ((k = 0; k < s; k++)); do addrs="$addrs${addrs:+,}$(ps_addr "$k")"; done
	if [ "$round" = 1 ]; then
		local pin="" set
		for ((k = 0; k < w; k++)); do pin="$pin worker$k@$(cpuset "$k" "$n")"; done
		for ((k = 0; k < s; k++)); do pin="$pin ps$k@$(cpuset $((w + k)) "$n")"; done
		echo "pinning $name:$pin"
	fi
	for ((k = 0; k < s; k++)); do
		local extra=()
		if [ -n "$prof" ] && [ "$k" = 0 ]; then extra=(-cpuprofile "$prof-ps.pprof"); fi
		node "$p-$((maxw + k))" "$(cpuset $((w + k)) "$n")" -role ps -index "$k" -listen "$(ps_addr "$k")" -linger 30s \
			"${extra[@]}" "${common[@]}" >"$dir/ps-$k.out" 2>&1 &
		ps_pids+=($!)
	done
	for ((k = 0; k < w; k++)); do
		local extra=()
		if [ -n "$prof" ] && [ "$k" = 0 ]; then extra=(-cpuprofile "$prof-worker.pprof"); fi
		node "$p-$k" "$(cpuset "$k" "$n")" -role worker -index "$k" -ps "$addrs" -ckdir "$dir/ck" \
			-ready "$dir/ready-$k" -go "$dir/go" "${extra[@]}" "${common[@]}" >"$dir/w-$k.out" 2>&1 &
		w_pids+=($!)
	done
	# The start line: every worker has its data and has reached every
	# parameter server before any trains.
	for ((k = 0; k < w; k++)); do
		until [ -e "$dir/ready-$k" ]; do
			kill -0 "${w_pids[$k]}" 2>/dev/null || { cat "$dir/w-$k.out" >&2; echo "run.sh: worker $k of $name died" >&2; exit 1; }
			for ((j = 0; j < s; j++)); do
				kill -0 "${ps_pids[$j]}" 2>/dev/null || { cat "$dir/ps-$j.out" >&2; echo "run.sh: parameter server $j of $name died" >&2; exit 1; }
			done
			sleep 0.05
		done
	done
	touch "$dir/go"
	local failed=0
	for ((k = 0; k < w; k++)); do wait "${w_pids[$k]}" || failed=1; done
	for pid in "${ps_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for ((k = 0; k < s; k++)); do wait "${ps_pids[$k]}" || failed=1; done
	if ((failed)); then
		tail -n 20 "$dir"/*.out >&2
		echo "run.sh: $name round $round failed" >&2
		exit 1
	fi
	cat "$dir"/w-*.out "$dir"/ps-*.out >>"$results"
	rm -rf "$dir"
}
for ((round = 1; round <= rounds; round++)); do
	for t in ${LOCAL_THREADS:-1}; do
		if ((t > ${#cpus[@]})); then
			[ "$round" != 1 ] || echo "LOCAL_THREADS: $t threads on ${#cpus[@]} CPUs: runs local/threads=${#cpus[@]}" >&2
			t=${#cpus[@]}
		fi
		name=local
		if [ "$t" != 1 ]; then name=local/threads=$t; fi
		(IFS=,; node "$p-local" "${cpus[*]:0:t}" -role local -steps "$steps" -config "$name" -round "$round") >>"$results" &
		wait $!
	done
	for mode in $modes; do
		for c in $configs; do
			run_cluster "$round" "$mode" "${c%x*}" "${c#*x}"
		done
	done
	echo "round $round done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo
echo "medians over $rounds rounds; examples/s of a cluster = the sum of its workers'; per step = per gradient a worker pushed;"
echo "cpu_µs/ex counts every process of the run (workers and parameter servers); comp/pull/push/wait: ms per step of the workers"
echo "(with async Overlap, pull and push run beside the compute; wait is what the computing did not hide)"
TRAINFLOW_DIST_NODE=1 "$work/node" -role summarize <"$results"
echo "load at the end: $(uptime)"
if [ -n "${KEEP:-}" ]; then cp "$results" "$KEEP"; echo "result lines: $KEEP"; fi
