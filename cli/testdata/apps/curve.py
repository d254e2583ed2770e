# A tuning trial's program that reports a learning curve, step by step:
# to the hypertune metrics file (--format=hypertune, as cloudml-hypertune
# writes it) or only as TensorBoard event files in AIP_TENSORBOARD_LOG_DIR
# (--format=tb, written here byte by byte: TFRecord framing with masked
# CRC32C, Events whose score is a one-element DT_DOUBLE tensor as TF2's
# summary writer writes it, and loss a simple_value; and an accuracy, a
# DT_DOUBLE tensor too, that peaks at step 2, its best printed at the end
# as BEST_ACCURACY).
#
# A learning rate of 10 or more diverges: the program then reports a poor
# score and runs until it is stopped, with a child process of its own
# (its pid and the child's go to $HOME/pid and $HOME/child.pid).
import argparse
import json
import os
import socket
import struct
import subprocess
import time

ap = argparse.ArgumentParser()
ap.add_argument("--lr", type=float, required=True)
ap.add_argument("--format", choices=["hypertune", "tb"], required=True)
ap.add_argument("--steps", type=int, default=5)
args = ap.parse_args()
home = os.environ["HOME"]
with open(os.path.join(home, "pid"), "w") as f:
    f.write(str(os.getpid()))

POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ POLY if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(b):
    c = crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    out = b""
    while True:
        x = n & 0x7F
        n >>= 7
        if n:
            out += bytes([x | 0x80])
        else:
            return out + bytes([x])


def field(num, wire, payload):
    if wire == 2:
        payload = varint(len(payload)) + payload
    return varint(num << 3 | wire) + payload


class Events:
    def __init__(self, logdir):
        os.makedirs(logdir, exist_ok=True)
        name = "events.out.tfevents.%d.%s" % (int(time.time()), socket.gethostname())
        self.f = open(os.path.join(logdir, name), "ab")
        self.write(field(1, 1, struct.pack("<d", time.time())) + field(3, 2, b"brain.Event:2"))

    def write(self, event):
        n = struct.pack("<Q", len(event))
        self.f.write(n + struct.pack("<I", masked(n)) + event + struct.pack("<I", masked(event)))
        self.f.flush()

    def scalars(self, step, score, loss, accuracy):
        values = b""
        for tag, v in ((b"score", score), (b"accuracy", accuracy)):
            tensor = field(1, 0, varint(2)) + field(2, 2, b"") + field(4, 2, struct.pack("<d", v))
            values += field(1, 2, field(1, 2, tag) + field(8, 2, tensor))
        values += field(1, 2, field(1, 2, b"loss") + field(2, 5, struct.pack("<f", loss)))
        self.write(field(1, 1, struct.pack("<d", time.time())) + field(2, 0, varint(step)) + field(5, 2, values))


diverges = args.lr >= 10
if diverges:
    child = subprocess.Popen(["/bin/sleep", "3600"])
    with open(os.path.join(home, "child.pid"), "w") as f:
        f.write(str(child.pid))
events = Events(os.environ["AIP_TENSORBOARD_LOG_DIR"]) if args.format == "tb" else None
steps = 100000 if diverges else args.steps
best_accuracy = 0.0
for step in range(1, steps + 1):
    score = 0.05 if diverges else round(1 - abs(args.lr - 0.3) - 0.1 / step, 6)
    loss = 1 - score
    # accuracy (event files only) peaks at step 2: a best that is not the last value
    accuracy = 0.05 if diverges else round(score - 0.1 * abs(step - 2), 6)
    best_accuracy = max(best_accuracy, accuracy)
    if events:
        events.scalars(step, score, loss, accuracy)
    else:
        with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a") as f:
            f.write(json.dumps({"global_step": str(step), "score": str(score), "loss": loss,
                                "timestamp": time.time(), "trial": os.environ["CLOUD_ML_TRIAL_ID"]}) + "\n")
    print("STEP %d SCORE=%r" % (step, score), flush=True)
    time.sleep(0.2 if diverges else 0.05)
print("SCORE=%r" % score)
if events:
    print("BEST_ACCURACY=%r" % best_accuracy)
