# A program that fails with the user's error (exit 2) while the file its
# argument names is missing, and otherwise reports accuracy 0.75 at step
# 10 and exits 0 (TestApplicationDuplicateAndReset). Every start prints its
# TF_CONFIG and adds a line to runs.txt in the model dir.
import json
import os
import sys
import time

print("TF_CONFIG=" + os.environ["TF_CONFIG"])
sys.stdout.flush()
with open(os.path.join(os.environ["AIP_MODEL_DIR"], "runs.txt"), "a") as f:
    f.write("run\n")
if not os.path.exists(sys.argv[1]):
    print("gate closed: " + sys.argv[1], file=sys.stderr)
    sys.exit(2)
with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a") as f:
    f.write(json.dumps({"global_step": "10", "accuracy": "0.75", "timestamp": time.time(), "trial": ""}) + "\n")
