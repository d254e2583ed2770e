#!/usr/bin/env bash
# bench/train/run.sh — training throughput of trainflow's Fashion-MNIST MLP
# (784-128-64-10, Adam, batch 128) and census linear model (Adam, batch
# 64) in the default build (train/internal/kernel: AVX2+FMA assembly where
# the CPU has it), with OpenBLAS (-tags openblas, when libopenblas-dev is
# installed) and with PyTorch 1.13 (Debian python3-torch), in the same run:
#
#   1 thread:  default build GOMAXPROCS=1 (MLP in float64 and in float32,
#              the DNN default), OpenBLAS, torch.set_num_threads(1)
#   2 threads: default build GOMAXPROCS=2 (the kernels split large GEMMs
#              across a worker pool) vs torch.set_num_threads(2), and
#              two GOMAXPROCS=1 processes side by side: the machine's
#              two-core capacity for the step in that round (on a shared
#              virtual machine it moves from round to round)
#
# and (issue #28) the two CNN presets, float32, Adam 1e-3, on the
# Fashion-MNIST images: fashion_mnist_cnn (jobspec.FashionCNN, batch 64)
# and mnist_cnn (jobspec.TutorialCNN, batch 128), trainflow GOMAXPROCS=1
# and 2 against torch at 1 and 2 threads (BenchmarkTrainCNN and
# torch_bench.py --models cnn). MODELS=mlp or MODELS=cnn runs one part.
#
# Rounds interleave all runs so that load from other processes hits all
# alike. It then prints medians, ratios to torch, the MLP's GEMM GFLOP/s
# next to the machine's AVX2 peak, and a CPU profile of the default build's
# float32 MLP step. Usage: bench/train/run.sh [rounds]   (default 5; env
# OUT=dir keeps the raw outputs, SECONDS_PER_RUN sets each measurement's
# length).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
secs=${SECONDS_PER_RUN:-3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
cpus=$(getconf _NPROCESSORS_ONLN) # not nproc, which obeys OMP_NUM_THREADS
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
python=/usr/bin/python3 # Debian's, where python3-torch lives
models=${MODELS:-mlp,cnn}
mlp=0 cnn=0
case ",$models," in *,mlp,*) mlp=1 ;; esac
case ",$models," in *,cnn,*) cnn=1 ;; esac

go test -c -o "$out/kernel.test" ./train/
go test -c -o "$out/gemm.test" ./train/internal/kernel/
backends=(kernel)
if [ "$mlp" = 0 ]; then
	: # the CNN part runs the default build only
elif [ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ]; then
	go test -tags openblas -c -o "$out/openblas.test" ./train/
	backends+=(openblas)
else
	echo "libopenblas-dev not installed: skipping the OpenBLAS build" >&2
fi
torch=0
if "$python" -c 'import torch' 2>/dev/null; then torch=1; else echo "python3-torch not installed: skipping PyTorch" >&2; fi
# Debian's torch takes its BLAS from the libblas.so.3 alternative: the
# reference BLAS unless an optimised one (libopenblas0) is installed,
# which made torch's MLP ~6× slower here.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
echo "torch's BLAS: ${blas:-unknown}" >&2
case "$blas" in */blas/libblas.so*) echo "warning: the reference BLAS; apt-get install libopenblas0 for a fair torch" >&2 ;; esac

bench1='TrainMLP/batch=128$|TrainMLP/float32/batch=128$|TrainCensusLinear/batch=64$'
: >"$out/torch.txt"
: >"$out/torch2.txt"
: >"$out/kernel2.txt"
: >"$out/pair.txt"
: >"$out/gemm.txt"
for b in "${backends[@]}"; do : >"$out/$b.txt"; done
for f in cnn1 cnn2 torchcnn1 torchcnn2; do : >"$out/$f.txt"; done
features=115
for r in $(seq "$rounds"); do
	if [ "$cnn" = 1 ]; then
		for p in 1 2; do
			[ "$p" -le "$cpus" ] || continue
			(cd train && GOMAXPROCS=$p "$out/kernel.test" -test.run '^$' -test.bench 'TrainCNN/' \
				-test.benchmem -test.benchtime "${secs}s" -test.count 1) >>"$out/cnn$p.txt"
			if [ "$torch" = 1 ]; then
				"$python" bench/train/torch_bench.py --models cnn --threads "$p" --seconds "$secs" --count 1 >>"$out/torchcnn$p.txt"
			fi
		done
	fi
	if [ "$mlp" = 0 ]; then
		echo "round $r of $rounds done, load $(cut -d" " -f1-3 /proc/loadavg)" >&2
		continue
	fi
	for b in "${backends[@]}"; do
		(cd train && GOMAXPROCS=1 "$out/$b.test" -test.run '^$' -test.bench "$bench1" \
			-test.benchmem -test.benchtime "${secs}s" -test.count 1) >>"$out/$b.txt"
	done
	# The GEMM alone on the MLP step's five products, next to the FMA
	# peak measured in the same moment (a boosting core runs above the
	# nominal clock): one line of each per round.
	(cd train/internal/kernel && GOMAXPROCS=1 "$out/gemm.test" -test.run '^$' -test.bench 'FMAPeak|Sgemm/./x/impl=avx2' \
		-test.benchtime 1s -test.count 1) >>"$out/gemm.txt"
	if [ "$cpus" -ge 2 ]; then
		(cd train && GOMAXPROCS=2 "$out/kernel.test" -test.run '^$' -test.bench 'TrainMLP/float32/batch=128$' \
			-test.benchmem -test.benchtime "${secs}s" -test.count 1) >>"$out/kernel2.txt"
		# The machine's two cores for this step: two 1-thread processes
		# side by side, sharing nothing but the caches, memory and host.
		# Their sum is what two cores gave independent steps in that
		# round, the 2-thread run's yardstick (taken seconds apart, so
		# either can catch a busier moment of the host).
		pids=()
		for k in a b; do
			(cd train && GOMAXPROCS=1 "$out/kernel.test" -test.run '^$' -test.bench 'TrainMLP/float32/batch=128$' \
				-test.benchtime "${secs}s" -test.count 1 >"$out/pair-$k.tmp") &
			pids+=($!)
		done
		for pid in "${pids[@]}"; do wait "$pid"; done # set -e: a failed run stops the script
		cat "$out/pair-a.tmp" "$out/pair-b.tmp" | awk '/^BenchmarkTrainMLP/ { for (i = 1; i < NF; i++) if ($(i+1) == "examples/s") { s += $i; n++ } }
			END { if (n != 2) exit 1; printf "BenchmarkTrainMLP/float32/batch=128/pair 1 0 ns/op %.0f examples/s\n", s }' >>"$out/pair.txt"
		rm -f "$out/pair-a.tmp" "$out/pair-b.tmp"
	fi
	features=$(awk '/CensusLinear/ { for (i = 1; i < NF; i++) if ($(i+1) == "features") printf "%d\n", $i }' "$out/kernel.txt" | tail -1)
	if [ "$torch" = 1 ]; then
		"$python" bench/train/torch_bench.py --census-dim "${features:-115}" --seconds "$secs" --count 1 >>"$out/torch.txt"
		if [ "$cpus" -ge 2 ]; then
			"$python" bench/train/torch_bench.py --threads 2 --mlp-only --seconds "$secs" --count 1 >>"$out/torch2.txt"
		fi
	fi
	echo "round $r of $rounds done, load $(cut -d" " -f1-3 /proc/loadavg)" >&2
done

# median examples/s of each (backend, model)
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) printf "%.0f", v[(NR+1)/2]; else printf "%.0f", (v[NR/2] + v[NR/2+1]) / 2 }'; }
goex() { [ -s "$out/$1.txt" ] || { echo -; return; }; awk -v pat="$2" '$1 ~ pat { for (i = 1; i < NF; i++) if ($(i+1) == "examples/s") print $i }' "$out/$1.txt" | median; }
tex() { awk -v pat="$2" '$0 ~ pat { for (i = 1; i <= NF; i++) if ($i ~ /^examples\/s=/) { sub("examples/s=", "", $i); print $i } }' "$out/$1.txt" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }

# per-round values of a run, in round order, and the median of the
# per-round ratios of two runs (load shifts between rounds more than
# within one)
gorounds() { awk -v pat="$2" '$1 ~ pat { for (i = 1; i < NF; i++) if ($(i+1) == "examples/s") print $i }' "$out/$1.txt"; }
trounds() { awk -v pat="$2" '$0 ~ pat { for (i = 1; i <= NF; i++) if ($i ~ /^examples\/s=/) { sub("examples/s=", "", $i); print $i } }' "$out/$1.txt"; }
rratio() { paste <(echo "$1") <(echo "$2") | awk 'NF == 2 && $2 > 0 { printf "%.4f\n", $1 / $2 }' | sort -n |
	awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) printf "%.2f", v[(NR+1)/2]; else printf "%.2f", (v[NR/2] + v[NR/2+1]) / 2 }'; }
# the lowest and highest of the per-round ratios of two runs
rrange() { paste <(echo "$1") <(echo "$2") | awk 'NF == 2 && $2 > 0 { r = $1 / $2; if (n++ == 0 || r < lo) lo = r; if (r > hi) hi = r }
	END { if (n) printf "%.2f–%.2f", lo, hi; else print "-" }'; }

if [ "$cnn" = 1 ]; then
	echo
	echo "CNN training examples/s (float32, Adam 1e-3, Fashion-MNIST), medians of $rounds rounds and of the rounds' ratios (raw outputs in $out)"
	printf '%-40s %12s %12s %10s\n' run trainflow torch ratio
	for m in "fashion 64" "tutorial 128"; do
		set -- $m
		for p in 1 2; do
			[ "$p" -le "$cpus" ] || continue
			g=$(goex "cnn$p" "TrainCNN/$1/batch=$2"); t=$(tex "torchcnn$p" "torch cnn $1 batch=$2 ")
			r=$(rratio "$(gorounds "cnn$p" "TrainCNN/$1/batch=$2")" "$(trounds "torchcnn$p" "torch cnn $1 batch=$2 ")")
			printf '%-40s %12s %12s %10s\n' "$1 cnn batch $2, $p thread(s)" "$g" "$t" "$r"
		done
		if [ "$cpus" -ge 2 ]; then
			echo "  $1: trainflow GOMAXPROCS=2 / GOMAXPROCS=1 = $(rratio "$(gorounds cnn2 "TrainCNN/$1/")" "$(gorounds cnn1 "TrainCNN/$1/")")," \
				"torch 2 threads / 1 = $(rratio "$(trounds torchcnn2 "torch cnn $1 ")" "$(trounds torchcnn1 "torch cnn $1 ")")"
		fi
	done
	echo
	echo "where a fashion CNN step's time goes (GOMAXPROCS=1, pprof -top):"
	(cd train && GOMAXPROCS=1 "$out/kernel.test" -test.run '^$' -test.bench 'TrainCNN/fashion' -test.benchtime "$((2 * secs))s" \
		-test.cpuprofile "$out/cnn.pprof" >/dev/null)
	go tool pprof -top -nodecount=16 -focus 'benchmarkSteps' "$out/kernel.test" "$out/cnn.pprof" 2>/dev/null | sed -n '/flat%/,$p'
fi
[ "$mlp" = 1 ] || exit 0

mlp1=$(goex kernel 'TrainMLP/batch=128'); mlp32=$(goex kernel 'TrainMLP/float32/batch=128')
mlp2=$(goex kernel2 'TrainMLP/float32/batch=128'); ob=$(goex openblas 'TrainMLP/float32/batch=128')
lin=$(goex kernel 'TrainCensusLinear/batch=64'); tmlp=$(tex torch 'torch mlp'); tmlp2=$(tex torch2 'torch mlp'); tlin=$(tex torch 'torch linear')
echo
echo "training examples/s, median of $rounds rounds (raw outputs in $out; TRAINFLOW_KERNELS=${TRAINFLOW_KERNELS:-})"
printf '%-40s %12s %12s %10s\n' run trainflow torch ratio
printf '%-40s %12s %12s %10s\n' "mlp float32, 1 thread" "$mlp32" "$tmlp" "$(ratio "$mlp32" "$tmlp")"
printf '%-40s %12s %12s %10s\n' "mlp float32, 2 threads (GOMAXPROCS=2)" "$mlp2" "$tmlp2" "$(ratio "$mlp2" "$tmlp2")"
printf '%-40s %12s %12s %10s\n' "mlp float64, 1 thread" "$mlp1" "$tmlp" "$(ratio "$mlp1" "$tmlp")"
printf '%-40s %12s %12s %10s\n' "mlp float32, OpenBLAS, 1 thread" "$ob" "$tmlp" "$(ratio "$ob" "$tmlp")"
printf '%-40s %12s %12s %10s\n' "census linear ($features f), batch 64" "$lin" "$tlin" "$(ratio "$lin" "$tlin")"
if [ "$cpus" -ge 2 ]; then
	# issue #30's goals: the first two ≥ 1.6 (medians of the rounds' ratios)
	one=$(gorounds kernel 'TrainMLP/float32/batch=128'); two=$(gorounds kernel2 'TrainMLP/float32/batch=128'); pair=$(gorounds pair '/pair$')
	echo "  mlp float32: trainflow GOMAXPROCS=2 / GOMAXPROCS=1 = $(rratio "$two" "$one")," \
		"trainflow GOMAXPROCS=2 / torch 2 threads = $(rratio "$two" "$(trounds torch2 'torch mlp')")," \
		"torch 2 threads / 1 = $(rratio "$(trounds torch2 'torch mlp')" "$(trounds torch 'torch mlp')")"
	echo "  rounds' range of GOMAXPROCS=2 / GOMAXPROCS=1: $(rrange "$two" "$one")"
	echo "  the machine: two 1-thread processes side by side / one alone (same round) = $(rratio "$pair" "$one") (range $(rrange "$pair" "$one"));" \
		"GOMAXPROCS=2 / that pair = $(rratio "$two" "$pair") (range $(rrange "$two" "$pair")): the share of the two cores' capacity one process gets"
fi

# GEMM work of one MLP example: forward 2·Σ in·out over the three layers,
# backward the same for the weight gradients plus 2·(128·64 + 64·10) for
# the activation gradients of layers 2 and 3.
flop=$(( 2 * (784*128 + 128*64 + 64*10) * 2 + 2 * (128*64 + 64*10) ))
ghz=$(awk -F: '/^cpu MHz/ { printf "%.3f", $2 / 1000; exit }' /proc/cpuinfo)
echo
echo "MLP GEMM work: $flop FLOP per example; AVX2 FMA peak per core = 2 units × 8 float32 lanes × 2 × ${ghz} GHz"
awk -v e1="$mlp32" -v e2="$mlp2" -v f="$flop" -v ghz="$ghz" 'BEGIN {
	peak = 2 * 8 * 2 * ghz
	if (e1 != "-") printf "  1 thread:  %.1f GFLOP/s of %.1f peak (%.0f%%)\n", e1 * f / 1e9, peak, 100 * e1 * f / 1e9 / peak
	if (e2 != "-") printf "  2 threads: %.1f GFLOP/s of %.1f peak (%.0f%%)\n", e2 * f / 1e9, 2 * peak, 100 * e2 * f / 1e9 / (2 * peak)
}'

# Per round: the five products' FLOP over their time (one product each,
# as a step runs them), divided by the FMA peak measured in that round.
echo
echo "the GEMM alone (train/internal/kernel BenchmarkSgemm, the MLP step's five products, 1 thread) against the FMA peak measured in the same round (BenchmarkFMAPeak):"
awk '
	/^BenchmarkFMAPeak/ { for (i = 1; i < NF; i++) if ($(i+1) == "GFLOP/s") peak[++np] = $i }
	/^BenchmarkSgemm\// {
		split($1, f, "/"); split(f[3], d, "x")
		flop[np + 1] += 2 * d[1] * d[2] * d[3]; ns[np + 1] += $3
		if (f[2] "/" f[3] == "NN/128x128x784") big[np + 1] = 2 * d[1] * d[2] * d[3] / $3
	}
	END {
		for (r = 1; r <= np; r++) if (ns[r] > 0) {
			g = flop[r] / ns[r]; e[r] = g / peak[r]
			printf "  round %d: %.1f GFLOP/s over the five, NN/128x128x784 %.1f, FMA peak %.1f: %.0f%% of peak\n", r, g, big[r], peak[r], 100 * e[r]
			printf "%.2f\n", 100 * e[r] >eff
		}
	}' eff="$out/gemm-eff.txt" "$out/gemm.txt"
[ -s "$out/gemm-eff.txt" ] && echo "  median: $(median <"$out/gemm-eff.txt")% of the measured peak (issue #30 goal: 75%)"

echo
echo "where a float32 MLP step's time goes (GOMAXPROCS=1, pprof -top):"
(cd train && GOMAXPROCS=1 "$out/kernel.test" -test.run '^$' -test.bench 'TrainMLP/float32/batch=128$' -test.benchtime "$((2 * secs))s" \
	-test.cpuprofile "$out/mlp.pprof" >/dev/null)
go tool pprof -top -nodecount=16 -focus 'benchmarkSteps' "$out/kernel.test" "$out/mlp.pprof" 2>/dev/null | sed -n '/flat%/,$p'

if command -v benchstat >/dev/null || [ -x "$(go env GOPATH)/bin/benchstat" ]; then
	echo
	PATH=$PATH:$(go env GOPATH)/bin benchstat $(for b in "${backends[@]}"; do echo "$b=$out/$b.txt"; done) 2>/dev/null | sed 's#'"$out"'/##g' || true
fi
