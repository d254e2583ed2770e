"""The package of cli's package tests (TestPackageJob): prints what a
replica was given and what it can reach, one KEY=value line each."""
import json
import os
import sys

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
