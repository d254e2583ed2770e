"""What a sandboxed program tries (sandbox_test.go): one action per run,
one line of result on stdout."""
import os
import sys
import time

action, args = sys.argv[1], sys.argv[2:]


def attempt(fn):
    try:
        fn()
    except OSError as e:
        print("refused", type(e).__name__, e.errno, flush=True)
    else:
        print("allowed", flush=True)


if action == "read":
    attempt(lambda: open(args[0], "rb").read(1))
elif action == "list":
    attempt(lambda: os.listdir(args[0]))
elif action == "write":
    def write():
        with open(args[0], "w") as f:
            f.write("written from the sandbox\n")
    attempt(write)
elif action == "env":
    print(repr(os.environ.get(args[0])), flush=True)
elif action == "whoami":
    print(os.getuid(), os.getgid(), os.getpid(), flush=True)
elif action == "forkbomb":
    # Every process forks for ever; the first reports once the kernel refused it.
    first = os.getpid()
    forked = 0
    while True:
        try:
            pid = os.fork()
        except OSError as e:
            if os.getpid() == first and forked >= 0:
                print("bounded", forked, e.errno, flush=True)
                forked = -1
            time.sleep(0.01)
            continue
        if pid != 0:
            if forked >= 0:
                forked += 1
        else:
            forked = -1
elif action == "memhog":
    chunks = []
    try:
        while True:
            chunks.append(bytearray(64 << 20))
    except MemoryError:
        print("memoryerror", len(chunks) * 64, flush=True)
elif action == "spin":
    while True:
        pass
else:
    sys.exit("unknown action " + action)
