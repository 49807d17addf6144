#!/usr/bin/python3
"""PyTorch twin of bench/optim_bench.cc: one optimizer step over a GPT's
parameters (same shapes), median over --steps after --warmup, for AdamW
(foreach=False, the single-tensor path psync's rounding follows, and
foreach=True), SGD with momentum (foreach=False) and clip_grad_norm_.
Prints "RESULT impl=torch op=<op> median_ms=... mean_ms=... min_ms=...".
"""
import argparse
import statistics
import time

import torch


def gpt_shapes(V, T, L, C):
    s = [(V, C), (T, C)]
    for _ in range(L):
        s += [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,), (C, 4 * C), (C,)]
    return s + [(C,), (C,)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab-size", type=int, default=256)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    torch.manual_seed(0)
    params = []
    for shape in gpt_shapes(a.vocab_size, a.block_size, a.n_layer, a.n_embd):
        p = torch.nn.Parameter(torch.randn(shape, device=dev) * 0.02)
        p.grad = torch.randn(shape, device=dev) * 1e-3
        params.append(p)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]

    def adamw(foreach):
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                 lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=foreach)

    def clip():
        torch.nn.utils.clip_grad_norm_(params, 1e-9)
        with torch.no_grad():
            for p in params:
                p.grad.mul_(1e9)

    ops = [("adamw", adamw(False).step), ("adamw_foreach", adamw(True).step),
           ("sgd_momentum", torch.optim.SGD(params, lr=1e-4, momentum=0.9, foreach=False).step),
           ("clip_grad_norm", clip)]
    for name, fn in ops:
        ms = []
        for i in range(a.warmup + a.steps):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            if i >= a.warmup:
                ms.append((time.perf_counter() - t0) * 1e3)
        print("RESULT impl=torch op=%s median_ms=%.4f mean_ms=%.4f min_ms=%.4f"
              % (name, statistics.median(ms), statistics.mean(ms), min(ms)))


if __name__ == "__main__":
    main()
