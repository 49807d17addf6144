#!/usr/bin/env python3
"""PyTorch Gloo allreduce latency, same shape as psync-allreduce-latency-bench:
world 2 processes on 127.0.0.1, float32 sum, 4 B .. 4 MiB (x4), p50/p90/p99
per size on rank 0, optional busy gap between iterations on every rank.

    /usr/bin/python3 bench/allreduce_torch.py --iters=300 --gap-us=500

Prints "RESULT impl=torch bytes=... p50_us=... p90_us=... p99_us=..." lines.
"""
import argparse
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torch_dist import free_port, init_gloo


def spin(us):
    if us <= 0:
        return
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


def run(rank, args, port):
    init_gloo(rank, args.world, port, 1)
    if rank == 0:
        print(f"{'impl':6} {'bytes':10} {'iters':6} {'p50_us':>10} {'p90_us':>10} {'p99_us':>10}", flush=True)
    nbytes = 4
    while nbytes <= args.max_bytes:
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        it = max(30, args.iters // 10) if nbytes > (256 << 10) else args.iters
        us = []
        for i in range(args.warmup + it):
            spin(args.gap_us)
            t0 = time.perf_counter()
            dist.all_reduce(t)  # synchronous: issue + wait, like Work::Wait
            t1 = time.perf_counter()
            if i >= args.warmup:
                us.append((t1 - t0) * 1e6)
        if rank == 0:
            print(f"{'torch':6} {nbytes:<10} {it:<6} {pct(us, .5):10.1f} {pct(us, .9):10.1f} {pct(us, .99):10.1f}")
            print(f"RESULT impl=torch bytes={nbytes} p50_us={pct(us, .5):.1f} p90_us={pct(us, .9):.1f} "
                  f"p99_us={pct(us, .99):.1f}", flush=True)
        nbytes *= 4
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--gap-us", type=int, default=0)
    ap.add_argument("--max-bytes", type=int, default=4 << 20)
    args = ap.parse_args()
    mp.start_processes(run, args=(args, free_port()), nprocs=args.world, start_method="fork")


if __name__ == "__main__":
    main()
