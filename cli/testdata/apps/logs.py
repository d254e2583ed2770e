# Prints known lines for `jobs stream-logs` and the console's job page,
# one of them markup, then waits (the test's go-ahead file, argv[1]) so
# that the test sees the lines stream while the job runs. The chief
# prints a last line after the go-ahead and exits, which ends the job.
import json
import os
import sys
import time

task = json.loads(os.environ["TF_CONFIG"])["task"]
name = "%s-%d" % (task["type"], task["index"])
print("hello from " + name, flush=True)
print("<script>alert('" + name + "')</script>", flush=True)
sys.stderr.write("stderr of " + name + "\n")
sys.stderr.flush()
deadline = time.time() + 120
while not os.path.exists(sys.argv[1]) and time.time() < deadline:
    time.sleep(0.05)
if task["type"] == "chief":
    print("goodbye from " + name, flush=True)
else:
    time.sleep(120)  # stopped when the chief's exit ends the job
