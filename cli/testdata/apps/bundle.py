# Copies the trainflow bundle in argv[1] (a prepared fixture) into its
# model dir (AIP_MODEL_DIR), as a program that exports one would; with
# argv[2] == "corrupt" it flips a byte of model.ckpt on the way.
import os
import shutil
import sys

model = os.environ["AIP_MODEL_DIR"]
for name in os.listdir(sys.argv[1]):
    shutil.copyfile(os.path.join(sys.argv[1], name), os.path.join(model, name))
if len(sys.argv) > 2 and sys.argv[2] == "corrupt":
    with open(os.path.join(model, "model.ckpt"), "r+b") as f:
        b = f.read(1)
        f.seek(0)
        f.write(bytes([b[0] ^ 0xFF]))
print("bundle copied", flush=True)
