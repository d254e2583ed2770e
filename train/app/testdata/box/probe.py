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
elif action == "fill":
    # Writes MiB after MiB to args[0] until the file system is full or
    # args[1] MiB are written.
    written = 0
    try:
        with open(args[0], "wb") as f:
            for _ in range(int(args[1])):
                f.write(b"\0" * (1 << 20))
                f.flush()
                written += 1
        print("wrote", written, flush=True)
    except OSError as e:
        print("refused", type(e).__name__, e.errno, "after", written, flush=True)
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
elif action == "term":
    # Stops cleanly on SIGTERM, leaving a note in the file args[0].
    import signal

    def stop(*_):
        with open(args[0], "w") as f:
            f.write("stopped on SIGTERM\n")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    # Short sleeps: a signal that lands just before a long sleep's system
    # call would wait for its end (Python runs handlers between bytecodes).
    while True:
        time.sleep(0.05)
elif action == "ignore":
    # Ignores SIGTERM: only SIGKILL ends it.
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    time.sleep(60)
elif action == "spin":
    while True:
        pass
else:
    sys.exit("unknown action " + action)
