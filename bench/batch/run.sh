#!/usr/bin/env bash
# bench/batch: batch prediction (BatchPredictionJob, Beam on prism) against
# the online server answering the same rows in batches of 32 over HTTP, in
# one run on the real stack (trainflow dev): 1M generated census rows, and
# the 10k Fashion-MNIST test images (IDX) with a float_vector DNN trained
# here by a job spec. Prints rows/s of both paths, their ratio, the peak
# RSS of the batch pipeline's process, and how many predictions are
# identical. Usage: bench/batch/run.sh [census rows, default 1000000]
# Env: CLIENTS (concurrent HTTP clients, default 2), FMNIST (dataset dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=${1:-1000000}
clients=${CLIENTS:-2}
fmnist=${FMNIST:-/usr/share/datasets/fashion-mnist}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/trainflow" ./cmd/trainflow
go build -o "$work/bench" ./bench/batch
port=$((27000 + RANDOM % 2000))
tp=127.0.0.1:$port hp=127.0.0.1:$((port + 2000))
tf="$work/trainflow"
"$tf" dev --home "$work/home" --temporal "$tp" --ui "" --http "$hp" --data-roots "$work,$fmnist" >"$work/dev.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q 'trainflow dev is up' "$work/dev.log" && break; sleep 0.3; done
grep -q 'trainflow dev is up' "$work/dev.log" || { cat "$work/dev.log"; exit 1; }

echo "== training the census model and a Fashion-MNIST DNN (float_vector) =="
echo '{"preset":"census","train":{"max_steps":1000}}' >"$work/census.json"
"$tf" jobs submit training census_b --temporal "$tp" --config "$work/census.json" --wait | tail -1
"$work/bench" idx2csv -images "$fmnist/train-images-idx3-ubyte.gz" -labels "$fmnist/train-labels-idx1-ubyte.gz" -n 10000 -out "$work/fm-train.csv"
"$work/bench" idx2csv -images "$fmnist/t10k-images-idx3-ubyte.gz" -labels "$fmnist/t10k-labels-idx1-ubyte.gz" -n 2000 -out "$work/fm-eval.csv"
cat >"$work/fm.json" <<JSON
{"model_name":"fmnist","data":{"train":["$work/fm-train.csv"],"eval":["$work/fm-eval.csv"],
 "schema":{"columns":[{"name":"image","type":"float_vector","length":784,"treatment":"scale","scale":255},{"name":"label","type":"string"}],
   "label":"label","label_kind":"multiclass"}},
 "model":{"type":"dnn_classifier","hidden_units":[128,64],"batch_size":128,"learning_rate":0.001},"train":{"max_steps":800}}
JSON
"$tf" jobs submit training fmnist_b --temporal "$tp" --config "$work/fm.json" --wait | tail -1
"$tf" datagen -rows "$rows" -seed 5 -out "$work/census.csv"

bench() { # name model format input
	local out="$work/home/jobs/$1"
	echo "== $1: $4 =="
	"$work/bench" peak -- "$tf" jobs submit prediction "$1" --temporal "$tp" --model "$2" --data-format "$3" \
		--input-paths "$4" --output-path "$out" --wait | tee "$work/$1.peak"
	"$work/bench" online -url "http://$hp/v1/models/$2:predict" -format "$3" -input "$4" -out "$out" -clients "$clients" | tee "$work/$1.online"
	local n wall online
	n=$(grep -h '^online_rows ' "$work/$1.online" | cut -d' ' -f2)
	wall=$(grep -h '^wall_seconds' "$work/$1.peak" | cut -d' ' -f2)
	online=$(grep -h '^online_rows_per_sec' "$work/$1.online" | cut -d' ' -f2)
	awk -v n="$n" -v w="$wall" -v o="$online" -v name="$1" \
		'BEGIN { b = n / w; printf "%s: batch %.0f rows/s (whole job, %d rows in %.1f s), online %.0f rows/s: batch/online %.2f\n", name, b, n, w, o, b / o }'
}
bench census_batch census CSV "$work/census.csv"
bench fmnist_batch fmnist IDX "$fmnist/t10k-images-idx3-ubyte.gz"
