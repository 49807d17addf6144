#!/usr/bin/env python3
"""What a lost worker costs: live recovery beside the restart path, same job.

Runs the main job's GPT (scripts/run-job.sh's model: L=4 H=4 C=128, block 64,
global batch 32, AdamW) on a byte corpus under psync-launch --nproc=WORLD
--max-restarts=KILLS, once with --recovery=live (no checkpoint directory) and
once with --recovery=restart (--checkpoint-dir, --checkpoint-every=EVERY), and
SIGKILLs the last-started worker KILLS times, each after rank 0 completed
another SPACING steps. Per kill it reads rank 0's --metrics file (one line per
completed step, flushed) and reports:

  first step   from the kill to the next step rank 0 completes (for restart:
               of the restarted rank 0, which resumed from the checkpoint)
  caught up    from the kill to rank 0 completing a step beyond the furthest
               one before the kill (the lost work included)
  lost steps   completed steps computed again: the furthest rank 0 had
               completed before the kill minus where the next generation
               started (live: where rank 0 rejoined; restart: the checkpoint)

and for live the heal time the workers log ("healed from rank R at step S
(T s)") with the state's size (weights + AdamW's two moments, from the final
weights file). Prints a table and RESULT lines.

  /usr/bin/python3 bench/recovery_bench.py [--build=build] [--world=2]
      [--kills=3] [--spacing=150] [--every=100] [--steps=0] [--zero=0]

With --zero=1|2 the optimizer state is sharded: live recovery rebuilds it on
every rank from the survivors' shards and copies ("rebuilt the sharded state
... (T s)", reported as the heal).
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


def worker_pids(launcher):
    out = subprocess.run(["ps", "--ppid", str(launcher), "-o", "pid=,args="], capture_output=True, text=True).stdout
    return sorted(int(line.split()[0]) for line in out.splitlines() if "psync-worker" in line)


def run(mode, a, work):
    d = tempfile.mkdtemp(prefix=f"{mode}-", dir=work)
    m0 = os.path.join(d, "m0.jsonl")
    flags = ["--model=gpt", f"--data={work}/corpus.txt", "--data-format=bytes", "--block-size=64", "--n-layer=4",
             "--n-head=4", "--n-embd=128", "--global-batch=32", "--optimizer=adamw", "--lr=3e-3",
             "--weight-decay=0.1", f"--steps={a.steps}", "--quiet", f"--metrics={d}/m{{rank}}.jsonl",
             f"--save={d}/final.st"]
    if mode == "restart":
        flags += [f"--checkpoint-dir={d}/ck", f"--checkpoint-every={a.every}"]
    if a.zero:
        flags += [f"--zero={a.zero}"]
    launch = os.path.join(a.build, "client/launch/psync-launch")
    rows = []
    with launched([launch, f"--nproc={a.world}", f"--max-restarts={a.kills}", f"--recovery={mode}", "--"] + flags,
                  os.path.join(d, "log")) as p:
        target = a.spacing
        for _ in range(a.kills):
            while not metrics_steps(m0) or max(metrics_steps(m0)) < target:
                if p.poll() is not None:
                    raise RuntimeError(f"{mode}: psync-launch ended early ({p.returncode}); see {d}/log")
                time.sleep(0.002)
            before = metrics_steps(m0)
            furthest = max(before)
            victim = worker_pids(p.pid)[-1]
            t0 = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            first = caught = None
            prev = before
            while caught is None:
                steps = metrics_steps(m0)
                now = time.monotonic()
                if steps != prev:
                    if len(steps) > len(prev) and steps[:len(prev)] == prev:
                        # Appended: a step completed (a live rank 0 keeps its
                        # file; a restarted one first rewrites it from the
                        # checkpoint's step, which is not a step).
                        if first is None:
                            first = now - t0
                    prev = steps
                if steps and steps[-1] > furthest:
                    caught = now - t0
                    if first is None:
                        first = caught
                if p.poll() is not None:
                    raise RuntimeError(f"{mode}: psync-launch ended during a recovery; see {d}/log")
                time.sleep(0.002)
            rows.append({"first": first, "caught": caught, "furthest": furthest})
            target = furthest + a.spacing
        rc = p.wait(timeout=600)
    text = open(os.path.join(d, "log")).read()
    if rc != 0:
        raise RuntimeError(f"{mode}: psync-launch exited {rc}; see {d}/log")
    # Where each next generation started, as rank 0 logs it.
    if mode == "live":
        starts = [int(x) for x in re.findall(r"rank=0\] generation \d+ ended .*? with the state of step (\d+)", text)]
    else:
        starts = [int(x) for x in re.findall(r"rank=0\] resumed from \S+ \(step (\d+)", text)]
    heals = [float(t) for t in re.findall(r"(?:healed from rank \d+|rebuilt the sharded state from the survivors' shards)"
                                          r" at step \d+ \(([0-9.]+) s", text)]
    for i, r in enumerate(rows):
        # Completed steps whose work was thrown away (the interrupted
        # iteration, never completed, is not one).
        r["lost"] = max(0, r["furthest"] - starts[i]) if i < len(starts) else -1
    state_mb = os.path.getsize(os.path.join(d, "final.st")) * 3 / 1e6  # weights + two AdamW moments
    return rows, heals, state_mb


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_kill_flags(ap)
    ap.add_argument("--every", type=int, default=100, help="restart mode's --checkpoint-every")
    ap.add_argument("--steps", type=int, default=0, help="the job's --steps (0: enough for the kills)")
    ap.add_argument("--zero", type=int, default=0, help="the workers' --zero")
    a = ap.parse_args()
    if a.steps == 0:
        a.steps = a.spacing * (a.kills + 2)
    work = tempfile.mkdtemp(prefix="psync-recovery-bench-")
    corpus(os.path.join(work, "corpus.txt"))
    print(f"recovery bench: GPT L=4 C=128 T=64, global batch 32, world {a.world}, --zero={a.zero}, {a.kills} kill(s) "
          f"every {a.spacing} steps; restart checkpoints every {a.every}; load {os.getloadavg()[0]:.1f}")
    print(f"{'mode':8} {'kill':>4} {'first step s':>13} {'caught up s':>12} {'lost steps':>10}")
    summary = {}
    for mode in ("live", "restart"):
        rows, heals, state_mb = run(mode, a, work)
        for i, r in enumerate(rows):
            print(f"{mode:8} {i + 1:>4} {r['first']:>13.3f} {r['caught']:>12.3f} {r['lost']:>10}")
        first = statistics.median(r["first"] for r in rows)
        caught = statistics.median(r["caught"] for r in rows)
        summary[mode] = (first, caught)
        extra = ""
        if heals:
            h = statistics.median(heals)
            extra = f" heal_s={h:.3f} state_mb={state_mb:.1f} heal_mb_per_s={state_mb / h if h > 0 else 0:.0f}"
        print(f"RESULT impl=psync-recovery mode={mode} world={a.world} zero={a.zero} first_step_s={first:.3f} "
              f"caught_up_s={caught:.3f} lost_steps_median={statistics.median(r['lost'] for r in rows)}"
              + extra)
    print(f"live/restart: first step {summary['live'][0] / summary['restart'][0]:.2f}x, "
          f"caught up {summary['live'][1] / summary['restart'][1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
