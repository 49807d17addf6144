#!/usr/bin/python3
"""PyTorch DDP twin of psync-overlap-bench: the same MLP (Linear + ReLU
between layers, none after the last), MSE loss, plain SGD, Gloo over
127.0.0.1, `--world` processes (torch.multiprocessing), the same per-rank
batch, bucket caps and threads per process. Modes:

  compute   the step without DDP (no communication)
  ddp       torch.nn.parallel.DistributedDataParallel (gradient_as_bucket_view)

Rank 0 prints the table and "RESULT impl=torch mode=... median_ms=...".

  /usr/bin/python3 bench/ddp_torch.py --widths=512,2048,2048,2048,512 --batch=64 --threads=1
"""
import argparse
import statistics
import sys
import time

from torch_dist import free_port, init_gloo


def make_model(torch, widths):
    torch.manual_seed(7)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def time_steps(torch, model, opt, x, y, steps, warmup):
    """(median wall ms, process CPU ms per step: every thread, incl. Gloo's)."""
    ms = []
    cpu0 = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if i >= warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms), (time.process_time() - cpu0) * 1e3 / steps


def worker(rank, a, port):
    import torch
    dist = init_gloo(rank, a.world, port, a.threads)
    widths = [int(w) for w in a.widths.split(",")]
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.rand(a.batch, widths[0], generator=g) * 2 - 1
    y = torch.rand(a.batch, widths[-1], generator=g) * 2 - 1
    best = {}
    best_cpu = {}
    for _ in range(a.rounds):
        for mode in a.modes.split(","):
            dist.barrier()
            model = make_model(torch, widths)
            if mode == "ddp":
                model = torch.nn.parallel.DistributedDataParallel(
                    model, bucket_cap_mb=a.bucket_cap_mb, gradient_as_bucket_view=True)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            med, cpu = time_steps(torch, model, opt, x, y, a.steps, a.warmup)
            best[mode] = min(med, best.get(mode, float("inf")))
            best_cpu[mode] = min(cpu, best_cpu.get(mode, float("inf")))
    dist.barrier()
    if rank == 0:
        nparams = sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))
        print(f"ddp_torch.py: torch {torch.__version__}, MLP {a.widths} ({nparams} params), batch {a.batch} per rank, "
              f"world {a.world}, {torch.get_num_threads()} thread(s)/rank, bucket_cap_mb {a.bucket_cap_mb}, "
              f"{a.steps} steps (+{a.warmup} warmup) x {a.rounds} round(s)")
        compute = best.get("compute")
        print(f"  {'mode':8} {'median ms':>12} {'exposed ms':>12} {'cpu ms/step':>12}")
        for mode, med in best.items():
            exposed = med - compute if compute is not None else 0.0
            print(f"  {mode:8} {med:12.2f} {exposed:12.2f} {best_cpu[mode]:12.2f}")
        for mode, med in best.items():
            exposed = med - compute if compute is not None else 0.0
            print(f"RESULT impl=torch mode={mode} median_ms={med:.3f} exposed_ms={exposed:.3f} cpu_ms={best_cpu[mode]:.3f}")
        sys.stdout.flush()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default="512,2048,2048,2048,512")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--bucket_cap_mb", type=float, default=25.0)
    ap.add_argument("--first_bucket_cap_mb", type=float, default=1.0,
                    help="accepted for symmetry; torch 1.13 fixes the first bucket at 1 MiB")
    ap.add_argument("--modes", default="compute,ddp")
    ap.add_argument("--rounds", type=int, default=1)
    a, _unknown = ap.parse_known_args()
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(a, free_port()), nprocs=a.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
