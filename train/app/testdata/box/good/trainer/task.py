"""Prints its argv as JSON (first line), then imports torch from the
system's site packages and prints its version (second line)."""
import json
import sys

print(json.dumps(sys.argv[1:]), flush=True)
import torch  # noqa: E402  (Debian's python3-torch, through --system-site-packages)

print("torch", torch.__version__, float(torch.ones(3).sum()), flush=True)
