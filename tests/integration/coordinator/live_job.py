"""What the Python integration tests of a live job share: starting
processes with their logs, bounded polling, failing with a message, and
the cleanup that prints the logs of a failed run.

Used by metrics_live_test.py and prometheus_server_test.py (run by ctest with
/usr/bin/python3; this folder is on their sys.path as the script's own).
"""
import os
import subprocess
import sys
import time

procs = []  # (Popen, log path) of everything start() started, in order


def fail(msg):
    raise AssertionError(msg)


def check(cond, msg):
    if not cond:
        fail(msg)


def start(argv, log, env=None):
    p = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                         env=dict(os.environ, **(env or {})))
    procs.append((p, log))
    return p


def wait_for(pred, what, timeout=90.0, every=0.05):
    """Polls pred() until it returns something truthy (bounded), and returns it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    fail(f"timed out after {timeout:.0f} s waiting for {what}")


def run_main(main):
    """Runs main(); on a failure prints it and every log's tail; stops what is left; exits 0 or 1."""
    code = 0
    try:
        main()
    except Exception as e:  # noqa: BLE001 - a failed check, or a process that misbehaved
        print(f"FAIL: {e}")
        for _, log in procs:
            try:
                print(f"---- {log}\n{open(log).read()[-3000:]}")
            except OSError:
                pass
        code = 1
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    sys.exit(code)
