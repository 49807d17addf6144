#!/usr/bin/env python3
"""What a lost coordinator costs (coordinator failover).

Runs the main job's GPT (scripts/run-job.sh's model: L=4 H=4 C=128, block 64,
global batch 32, AdamW) under psync-launch --nproc=WORLD and SIGKILLs the
launcher's coordinator KILLS times, each after rank 0 completed another
SPACING steps. psync-launch starts the coordinator again on the same port,
and the workers, which train on while their plans last, re-register with it.
Per kill it reads rank 0's --metrics file (one line per completed step,
flushed) and reports:

  stall      the longest time between two completed steps of rank 0 from the
             kill on, less the median step time before it: the time the job
             made no progress because of the loss
  start      the coordinator's own start time: from spawning psync-coordinator
             to its port file, measured alone (median of 5)

The goal (the coordinator failover issue): stall <= start + 1 s. Before
failover, the same kill ended the job (every worker exited 5). Prints a table
and RESULT lines.

  /usr/bin/python3 bench/failover_bench.py [--build=build] [--world=2]
      [--kills=3] [--spacing=150]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_inputs import add_kill_flags, corpus, launched, metrics_steps  # noqa: E402


def coordinator_start_s(build, work):
    """Median time from spawning psync-coordinator to its port file."""
    times = []
    for i in range(5):
        port_file = os.path.join(work, f"port{i}")
        t0 = time.monotonic()
        p = subprocess.Popen([os.path.join(build, "server/psync-coordinator"), "--host=127.0.0.1", "--port=0",
                              "--world-size=2", f"--port-file={port_file}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.exists(port_file):
            time.sleep(0.001)
        times.append(time.monotonic() - t0)
        p.send_signal(signal.SIGTERM)
        p.wait()
    return statistics.median(times)


def coordinator_pid(log_path):
    with open(log_path) as f:
        pids = re.findall(r"coordinator \S+ \(pid (\d+)", f.read())
    return int(pids[-1]) if pids else None


def run(a, work):
    d = tempfile.mkdtemp(prefix="failover-", dir=work)
    m0 = os.path.join(d, "m0.jsonl")
    steps = a.spacing * (a.kills + 2)
    flags = ["--model=gpt", f"--data={work}/corpus.txt", "--data-format=bytes", "--block-size=64", "--n-layer=4",
             "--n-head=4", "--n-embd=128", "--global-batch=32", "--optimizer=adamw", "--lr=3e-3",
             "--weight-decay=0.1", f"--steps={steps}", "--quiet", f"--metrics={d}/m{{rank}}.jsonl"]
    log_path = os.path.join(d, "log")
    seen = {}  # step -> monotonic time rank 0's metrics line appeared
    rows = []
    with launched([os.path.join(a.build, "client/launch/psync-launch"), f"--nproc={a.world}", "--"] + flags,
                  log_path) as p:

        def poll():
            now = time.monotonic()
            for s in metrics_steps(m0):
                seen.setdefault(s, now)
            if p.poll() is not None and p.returncode != 0:
                raise RuntimeError(f"psync-launch exited {p.returncode}; see {log_path}")

        target = a.spacing
        for _ in range(a.kills):
            while not seen or max(seen) < target:
                poll()
                time.sleep(0.002)
            before = sorted(seen.items())
            gaps = [t2 - t1 for (_, t1), (_, t2) in zip(before[-50:], before[-49:])]
            step_s = statistics.median(gaps)
            furthest = max(seen)
            pid = coordinator_pid(log_path)
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            # Watch until rank 0 is well past the kill (its plans last K steps).
            while max(seen) < furthest + 20:
                poll()
                time.sleep(0.002)
            after = sorted((t, s) for s, t in seen.items() if t >= t0 or s == furthest)
            stall = max(t2 - t1 for (t1, _), (t2, _) in zip(after, after[1:])) - step_s
            rows.append({"stall": stall, "step_s": step_s, "at": furthest, "kill_t": t0})
            target = furthest + a.spacing
        rc = p.wait(timeout=900)
    if rc != 0:
        raise RuntimeError(f"psync-launch exited {rc}; see {log_path}")
    text = open(log_path).read()
    restarts = len(re.findall(r"starting it again on port", text))
    if restarts != a.kills:
        raise RuntimeError(f"psync-launch started the coordinator again {restarts} times, not {a.kills}; see {log_path}")
    if re.search(r"starting a replacement|restarting", text):
        raise RuntimeError(f"a worker was restarted; see {log_path}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_kill_flags(ap)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="psync-failover-bench-")
    corpus(os.path.join(work, "corpus.txt"))
    start = coordinator_start_s(a.build, work)
    print(f"failover bench: GPT L=4 C=128 T=64, global batch 32, world {a.world}, {a.kills} coordinator kill(s) "
          f"every {a.spacing} steps; coordinator start {start:.3f} s; load {os.getloadavg()[0]:.1f}")
    rows = run(a, work)
    print(f"{'kill':>4} {'at step':>8} {'step s':>8} {'stall s':>8} {'start+1 s':>10}")
    for i, r in enumerate(rows):
        print(f"{i + 1:>4} {r['at']:>8} {r['step_s']:>8.3f} {r['stall']:>8.3f} {start + 1:>10.3f}")
    stall = statistics.median(r["stall"] for r in rows)
    worst = max(r["stall"] for r in rows)
    print(f"RESULT impl=psync-failover world={a.world} kills={a.kills} stall_s_median={stall:.3f} "
          f"stall_s_max={worst:.3f} coordinator_start_s={start:.3f} goal_s={start + 1:.3f} "
          f"met={'yes' if worst <= start + 1 else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
