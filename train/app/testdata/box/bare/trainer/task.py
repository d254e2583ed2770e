"""A package without setup.py (gcloud's --package-path trainer/): prints its argv as JSON."""
import json
import sys

print(json.dumps(sys.argv[1:]), flush=True)
