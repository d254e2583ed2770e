# Prints what trainflow told this replica: TF_CONFIG, its argv after the
# program, and whether two variables of the worker's environment reached
# it (one passed through by the operator, one not).
#
# Every replica leaves a file in the model dir once it has printed; the
# chief waits for all of them before it exits (the chief's exit ends the
# job and stops the others).
import json
import os
import sys
import time

tf = json.loads(os.environ["TF_CONFIG"])
print("TF_CONFIG=" + os.environ["TF_CONFIG"])
print("ARGS=" + json.dumps(sys.argv[1:], separators=(",", ":")))
print("PASSED=" + os.environ.get("TRAINFLOW_TEST_PASSED", "<unset>"))
print("SECRET=" + os.environ.get("TRAINFLOW_TEST_SECRET", "<unset>"))
print("RANK=" + os.environ.get("RANK", "<unset>") + " WORLD_SIZE=" + os.environ.get("WORLD_SIZE", "<unset>"))
sys.stdout.flush()
model = os.environ["AIP_MODEL_DIR"]
task = tf["task"]
open(os.path.join(model, "%s-%d.done" % (task["type"], task["index"])), "w").close()
if task["type"] in ("chief", "master"):
    want = sum(len(v) for v in tf["cluster"].values())
    deadline = time.time() + 120
    while len([n for n in os.listdir(model) if n.endswith(".done")]) < want and time.time() < deadline:
        time.sleep(0.05)
