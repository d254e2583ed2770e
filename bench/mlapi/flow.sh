#!/usr/bin/env bash
# The ml/v1 flow as a Cloud ML Engine user's curl script drives it, timed,
# on one dev stack of this tree's trainflow, against a baseline in the same
# run: the same census job (3,000 steps, generated rows) submitted with
# `trainflow jobs submit training --wait`. Per round it prints
#   api:  create answered, RUNNING first seen by jobs.get, the job's end
#         (its endTime) to SUCCEEDED seen by jobs.get, create to SUCCEEDED
#         seen; versions.create of the job's export to its operation done
#   cli:  submit to --wait's return
# and the medians, with the ratio api/cli of create-to-done. Usage:
#   bench/mlapi/flow.sh [ROUNDS]
set -euo pipefail
rounds=${1:-5}
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/tf" ./cmd/trainflow
port=$((20000 + RANDOM % 10000))
http=$((port + 1))
"$work/tf" dev --home "$work/home" --temporal "127.0.0.1:$port" --ui "" --http "127.0.0.1:$http" --log-level error >"$work/dev.log" 2>&1 &
for _ in $(seq 1 300); do # the prediction server starts last, after the worker
	curl -fsS "http://127.0.0.1:$http/v2/health/ready" >/dev/null 2>&1 && break
	sleep 0.2 # polling the stack's readiness
done
export TRAINFLOW_HOME=$work/home
U=http://127.0.0.1:$http/v1/projects/bench
curl -fsS -X POST -d '{"name": "bench_model"}' "$U/models" >/dev/null
/usr/bin/python3 - "$U" "$rounds" "$work/tf" "127.0.0.1:$port" <<'PY'
import json, statistics, subprocess, sys, time, urllib.request, datetime
U, rounds, tf, temporal = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def call(method, url, body=None):
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json; charset=utf-8"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)
def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")[:26] + "+00:00").timestamp()
api, cli, ver = [], [], []
for r in range(1, rounds + 1):
    t0 = time.time()
    call("POST", U + "/jobs", {"jobId": f"api_{r}", "trainingInput": {}})
    t1 = time.time()
    running = None
    while True:  # a user's script polls jobs.get; each call is a round trip
        j = call("GET", U + f"/jobs/api_{r}")
        now = time.time()
        if j["state"] == "RUNNING" and running is None:
            running = now
        if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
    assert j["state"] == "SUCCEEDED", j
    done = now
    op = call("POST", U + "/models/bench_model/versions", {"name": f"v{r}", "deploymentUri": j["trainingOutput"]["builtInAlgorithmOutput"]["modelPath"]})
    v0 = time.time()
    while not op.get("done"):
        op = call("GET", U.rsplit("/v1/", 1)[0] + "/v1/" + op["name"])
    ver.append(time.time() - v0)
    assert "error" not in op, op
    api.append(done - t0)
    run_s = f"{running - t0:.3f}s" if running else "never (QUEUED/PREPARING to SUCCEEDED between two gets)"
    print(f"round {r} api: create {t1 - t0:.3f}s, RUNNING seen {run_s}, end->SUCCEEDED seen {done - ts(j['endTime']):.3f}s, create->SUCCEEDED seen {done - t0:.3f}s; versions.create->done {ver[-1]:.3f}s")
    c0 = time.time()
    subprocess.run([tf, "jobs", "submit", "training", f"cli_{r}", "--temporal", temporal, "--wait"], check=True, stdout=subprocess.DEVNULL)
    cli.append(time.time() - c0)
    print(f"round {r} cli: submit->--wait returned {cli[-1]:.3f}s")
ma, mc = statistics.median(api), statistics.median(cli)
print(f"median api create->SUCCEEDED seen {ma:.3f}s, cli submit --wait {mc:.3f}s, ratio api/cli {ma / mc:.2f}; versions.create->done median {statistics.median(ver):.3f}s")
PY
