"""The package of cli's package tests (TestPackageJob): prints what a
replica was given and what it can reach, one KEY=value line each."""
import json
import os
import sys
import time

print("TF_CONFIG=" + os.environ.get("TF_CONFIG", "<unset>"))
print("ARGS=" + json.dumps(sys.argv[1:], separators=(",", ":")))
print("SECRET=" + os.environ.get("TRAINFLOW_TEST_SECRET", "<unset>"))
print("PYTHON=" + sys.executable)
for a in sys.argv[1:]:
    if a.startswith("--read="):
        try:
            with open(a[len("--read="):]) as f:
                print("READ=" + f.read().strip())
        except OSError as e:
            print("READ=" + type(e).__name__)
sys.stdout.flush()

# Every replica leaves a file in the model dir once it has printed; the
# chief waits for all of them before it exits (the chief's exit ends the
# job and stops the others, which may still be installing the package).
tf = json.loads(os.environ["TF_CONFIG"])
model = os.environ["AIP_MODEL_DIR"]
task = tf["task"]
open(os.path.join(model, "%s-%d.done" % (task["type"], task["index"])), "w").close()
if task["type"] in ("chief", "master"):  # master: runtime versions before 2.1
    want = sum(len(v) for v in tf["cluster"].values())
    deadline = time.time() + 120
    while len([n for n in os.listdir(model) if n.endswith(".done")]) < want and time.time() < deadline:
        time.sleep(0.05)
