# Reports one step in the hypertune metrics file, then hangs: a replica
# that is alive but makes no progress.
import json
import os
import time

with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "w") as f:
    f.write(json.dumps({"global_step": "1", "loss": "0.5"}) + "\n")
time.sleep(3600)
