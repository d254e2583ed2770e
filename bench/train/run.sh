#!/usr/bin/env bash
# bench/train/run.sh — single-thread training throughput of trainflow's
# Fashion-MNIST MLP (784-128-64-10, Adam, batch 128) and census linear
# model (Adam, batch 64), with gonum's pure-Go BLAS, with OpenBLAS
# (-tags openblas, when libopenblas-dev is installed) and PyTorch 1.13
# (Debian python3-torch, torch.set_num_threads(1)) in the same run. The
# MLP runs twice: computing in float64, and with ModelSpec.Float32 (float32
# passes, float64 variables), which is what torch (float32) does.
#
# Rounds interleave the three so that load from other processes hits all
# alike. Usage: bench/train/run.sh [rounds]   (default 5; env OUT=dir keeps
# the raw outputs, SECONDS_PER_RUN sets each measurement's length).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
secs=${SECONDS_PER_RUN:-3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
python=/usr/bin/python3 # Debian's, where python3-torch lives

go test -c -o "$out/gonum.test" ./train/
backends=(gonum)
if [ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ]; then
	go test -tags openblas -c -o "$out/openblas.test" ./train/
	backends+=(openblas)
else
	echo "libopenblas-dev not installed: skipping the OpenBLAS build" >&2
fi
torch=0
if "$python" -c 'import torch' 2>/dev/null; then torch=1; else echo "python3-torch not installed: skipping PyTorch" >&2; fi

: >"$out/torch.txt"
for b in "${backends[@]}"; do : >"$out/$b.txt"; done
features=115
for r in $(seq "$rounds"); do
	for b in "${backends[@]}"; do
		(cd train && "$out/$b.test" -test.run '^$' -test.bench 'TrainMLP/batch=128$|TrainMLP/float32/batch=128$|TrainCensusLinear/batch=64$' \
			-test.benchmem -test.benchtime "${secs}s" -test.count 1) >>"$out/$b.txt"
	done
	features=$(awk '/CensusLinear/ { for (i = 1; i < NF; i++) if ($(i+1) == "features") printf "%d\n", $i }' "$out/gonum.txt" | tail -1)
	if [ "$torch" = 1 ]; then
		"$python" bench/train/torch_bench.py --census-dim "${features:-115}" --seconds "$secs" --count 1 >>"$out/torch.txt"
	fi
	echo "round $r of $rounds done" >&2
done

# median examples/s of each (backend, model)
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) printf "%.0f", v[(NR+1)/2]; else printf "%.0f", (v[NR/2] + v[NR/2+1]) / 2 }'; }
goex() { awk -v pat="$2" '$1 ~ pat { for (i = 1; i < NF; i++) if ($(i+1) == "examples/s") print $i }' "$out/$1.txt" | median; }
tex() { awk -v pat="$1" '$0 ~ pat { sub("examples/s=", "", $4); print $4 }' "$out/torch.txt" | median; }
echo
echo "single-thread training examples/s, median of $rounds rounds (raw outputs in $out)"
printf '%-32s %12s %12s %12s\n' model gonum openblas torch
printf '%-32s %12s %12s %12s\n' "fashion-mnist mlp, batch 128" "$(goex gonum 'TrainMLP/batch=128')" \
	"$( [ -e "$out/openblas.txt" ] && goex openblas 'TrainMLP/batch=128' || echo -)" "$(tex 'torch mlp')"
printf '%-32s %12s %12s %12s\n' "  same, float32 compute" "$(goex gonum 'TrainMLP/float32/batch=128')" \
	"$( [ -e "$out/openblas.txt" ] && goex openblas 'TrainMLP/float32/batch=128' || echo -)" "(float32)"
printf '%-32s %12s %12s %12s\n' "census linear ($features f), batch 64" "$(goex gonum 'TrainCensusLinear/batch=64')" \
	"$( [ -e "$out/openblas.txt" ] && goex openblas 'TrainCensusLinear/batch=64' || echo -)" "$(tex 'torch linear')"
if command -v benchstat >/dev/null || [ -x "$(go env GOPATH)/bin/benchstat" ]; then
	echo
	PATH=$PATH:$(go env GOPATH)/bin benchstat $(for b in "${backends[@]}"; do echo "$b=$out/$b.txt"; done) 2>/dev/null | sed 's#'"$out"'/##g' || true
fi
