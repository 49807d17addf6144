#!/usr/bin/env python3
"""Long runs do not slow down (issue 25 item 3): psync-worker's cost per step
must not grow with the step count.

  bench/long_run_bench.py [--build=build] [--steps=60000] [--rounds=3] [--long-steps=1000000]
  (--rounds=0: the long run only; --long-steps=0: the 60k-step runs only)

1. A tiny MLP (--widths=8,8,4, global batch 8, one rank) for --steps with the
   default progress line every 10 steps and with --progress-every=0,
   alternating A/B for --rounds rounds: wall seconds each, the min ratio.
2. One run of --long-steps steps (progress line every 10): the worker's CPU (user + system, from
   /proc/PID/stat, 10 ms ticks) per step over the 5,000 steps from 10^3,
   10^4, 10^5 and up to --long-steps (read when the progress line of that
   step appears).
Every run is a real psync-coordinator (world 1) and psync-worker on
127.0.0.1; prints the load average beside the numbers (the machine is shared).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TICK  # utime, stime


def start_coordinator(build, tmp):
    port_file = os.path.join(tmp, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    c = subprocess.Popen([f"{build}/server/psync-coordinator", "--world-size=1", "--host=127.0.0.1", "--port=0",
                          f"--port-file={port_file}", "--exit-when-done"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        if os.path.exists(port_file):
            return c, open(port_file).read().strip()
        time.sleep(0.01)
    c.kill()
    sys.exit("psync-coordinator did not start")


def worker_argv(build, port, steps, extra):
    return [f"{build}/worker/runtime/psync-worker", f"--coordinator=127.0.0.1:{port}", "--rank=0", "--world-size=1",
            f"--steps={steps}", "--widths=8,8,4", "--global-batch=8"] + extra


def timed_run(build, tmp, steps, progress_every):
    c, port = start_coordinator(build, tmp)
    t0 = time.monotonic()
    subprocess.run(worker_argv(build, port, steps, [f"--progress-every={progress_every}"]),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.monotonic() - t0
    c.wait(timeout=30)
    return wall


def cpu_per_step(build, tmp, steps):
    c, port = start_coordinator(build, tmp)
    span = 5000
    starts = [m for m in (1000, 10000, 100000) if m + span <= steps] + [steps - span]
    wanted = set()
    for m in starts:
        wanted.update({m, m + span})
    # The default progress line (every 10 steps): what a user's long run does.
    w = subprocess.Popen(worker_argv(build, port, steps, ["--progress-every=10"]), stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    cpu_at = {}
    for line in w.stdout:
        if line.startswith("step "):
            step = int(line.split()[1].split("/")[0])
            if step in wanted:
                cpu_at[step] = cpu_s(w.pid)
    w.wait()
    c.wait(timeout=30)
    return [(m, m + span, (cpu_at[m + span] - cpu_at[m]) / span * 1e6) for m in starts
            if m in cpu_at and m + span in cpu_at]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=60000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--long-steps", type=int, default=1000000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"load average {os.getloadavg()[0]:.2f}")
        walls = {10: [], 0: []}
        for r in range(a.rounds):  # --rounds=0: only the long run
            for every in (10, 0):
                walls[every].append(timed_run(a.build, tmp, a.steps, every))
                print(f"round {r} --progress-every={every}: {walls[every][-1]:.2f} s")
        if a.rounds > 0:
            ratio = min(walls[10]) / min(walls[0])
            print(f"RESULT {a.steps} steps: progress every 10: min {min(walls[10]):.2f} s, none: min {min(walls[0]):.2f} s, "
                  f"ratio {ratio:.3f} (goal <= 1.15); load average {os.getloadavg()[0]:.2f}")
        if a.long_steps > 0:
            for lo, hi, us in cpu_per_step(a.build, tmp, a.long_steps):
                print(f"RESULT cpu per step over steps {lo}..{hi}: {us:.1f} us")
            print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
