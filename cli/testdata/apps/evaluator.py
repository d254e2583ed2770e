# A replica of a job with an evaluator (TestApplicationEvaluator): prints
# its TF_CONFIG, writes its pid to $HOME/pid, and by role:
#
# - the evaluator reports its accuracy in its hypertune metrics file,
#   leaves evaluator.ready in the model dir, then runs until it is
#   stopped (--evaluator=run) or fails with the user's error, exit 3
#   (--evaluator=crash);
# - the chief waits for evaluator.ready, reports accuracy 0.7, 0.95 and
#   0.9 at steps 100, 200 and 300, then exits 0 (run) or runs until it is stopped (crash);
# - a worker exits 0.
import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--evaluator", choices=["run", "crash"], required=True)
args = ap.parse_args()
task = json.loads(os.environ["TF_CONFIG"])["task"]
print("TF_CONFIG=" + os.environ["TF_CONFIG"])
sys.stdout.flush()
with open(os.path.join(os.environ["HOME"], "pid"), "w") as f:
    f.write(str(os.getpid()))
model = os.environ["AIP_MODEL_DIR"]
ready = os.path.join(model, "evaluator.ready")


def report(step, accuracy):
    with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a") as f:
        f.write(json.dumps({"global_step": str(step), "accuracy": str(accuracy), "timestamp": time.time(), "trial": ""}) + "\n")


def run_until_stopped():
    while True:
        time.sleep(1)


if task["type"] == "evaluator":
    report(300, 0.8)
    open(ready, "w").close()
    if args.evaluator == "crash":
        print("evaluator: the eval data is corrupt", file=sys.stderr)
        sys.exit(3)
    run_until_stopped()
elif task["type"] in ("chief", "master"):
    deadline = time.time() + 120
    while not os.path.exists(ready) and time.time() < deadline:
        time.sleep(0.05)
    for step, accuracy in ((100, 0.7), (200, 0.95), (300, 0.9)):
        report(step, accuracy)
    if args.evaluator == "crash":
        run_until_stopped()
