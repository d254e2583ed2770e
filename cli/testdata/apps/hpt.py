# A tuning trial's program: reads its tuned flags (--x=, --opt=), writes
# its score to the hypertune metrics file as cloudml-hypertune does, and
# prints what it was told.
import argparse
import json
import os
import time

ap = argparse.ArgumentParser()
ap.add_argument("--x", type=float, required=True)
ap.add_argument("--opt", default="sgd")
ap.add_argument("--fixed", default="")
args = ap.parse_args()
print("TF_CONFIG=" + os.environ["TF_CONFIG"])
print("TRIAL=" + os.environ["CLOUD_ML_TRIAL_ID"])
score = 1 - (args.x - 0.3) ** 2 + (0.01 if args.opt == "adam" else 0)
with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a") as f:
    f.write(json.dumps({"global_step": "100", "score": str(score), "timestamp": time.time(),
                        "trial": os.environ["CLOUD_ML_TRIAL_ID"]}) + "\n")
print("SCORE=" + str(score))
