#!/usr/bin/python3
"""PyTorch twin of psync-gpt-step-bench: the GPT of the --model=gpt contract
(the model class of tests/integration/worker/gpt_reference.py, imported, so
both benches and the exactness tests train the same network), forward + mean
cross-entropy over all B*T positions + backward + AdamW (lr 3e-4, weight
decay 0.1 on >= 2-D parameters, betas 0.9/0.95, foreach=False: the
single-tensor path psync's AdamW matches bit for bit; --adamw=best: fused
where this torch has it for the device, else foreach), random int64 tokens.

  --precision=bf16: forward and loss under torch.autocast(device, bfloat16)
  (PyTorch's mixed precision: bf16 matmuls, fp32 master weights and AdamW),
  the GPU's TF32 off; --precision=tf32: fp32 with
  torch.backends.cuda.matmul.allow_tf32 (CPU: fp32). --attention=sdpa uses
  F.scaled_dot_product_attention(is_causal=True) where this torch has it
  (2.0+; torch 1.13 has none, so it falls back to the hand-written causal
  attention, the best 1.13 offers), --compile wraps the model in
  torch.compile (2.0+).

  single   one process, the whole --batch, torch.set_num_threads(--threads),
           on --device (cpu, or cuda[:N]: each phase timed after
           torch.cuda.synchronize())
  ddp      --world processes (torch.multiprocessing, Gloo on 127.0.0.1, a
           free port), each on --batch/world sequences, --threads each:
             compute   the same per-rank step without DDP
             ddp       DistributedDataParallel (gradient_as_bucket_view)
             zero1     with --zero: DDP + ZeroRedundancyOptimizer(AdamW)
                       (torch's ZeRO-1: optimizer state sharded by
                       parameter, updated parameters broadcast by owner)

Prints a table and "RESULT impl=torch mode=... median_ms=..." lines (the
same keys as psync-gpt-step-bench).

  /usr/bin/python3 bench/gpt_torch.py --mode=single --threads=1
  /usr/bin/python3 bench/gpt_torch.py --mode=ddp --world=2
"""
import argparse
import math
import os
import statistics
import sys
import time

from torch_dist import free_port, init_gloo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration", "worker"))


def make_model(torch, a):
    from gpt_reference import GPT
    torch.manual_seed(7)
    model = GPT(a.vocab_size, a.block_size, a.n_layer, a.n_head, a.n_embd)
    # psync's initialisation (worker/nn/models/gpt.h), so both sides train the same kind of numbers.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * a.n_layer))
            elif name.startswith("ln") or ".ln_" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02)
    return model


def adamw_kwargs(torch, a, device):
    """AdamW's implementation: single (foreach=False), foreach, fused, or best (fused if available here)."""
    import inspect
    has_fused = "fused" in inspect.signature(torch.optim.AdamW).parameters
    if a.adamw == "single":
        return {"foreach": False}
    if a.adamw == "foreach":
        return {"foreach": True}
    if a.adamw == "fused" or (a.adamw == "best" and has_fused and device.type == "cuda"):
        return {"fused": True}
    return {"foreach": True}


def make_adamw(torch, model, a=None, device=None, zero=False):
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    kwargs = adamw_kwargs(torch, a, device) if a is not None else {"foreach": False}
    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(decay, optimizer_class=torch.optim.AdamW, lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                      weight_decay=0.1, **kwargs)
        opt.add_param_group({"params": no_decay, "weight_decay": 0.0})
        return opt
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **kwargs)


def use_sdpa(torch):
    """Makes gpt_reference's Block attend with F.scaled_dot_product_attention; False when torch lacks it."""
    import torch.nn.functional as F
    if not hasattr(F, "scaled_dot_product_attention"):
        return False
    from gpt_reference import Block

    def attention(self, x):
        B, T, C = x.shape
        hs = C // self.H
        q, k, v = self.attn.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, hs).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.attn.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    Block.attention = attention
    return True


def tokens(torch, a, b, rank):
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randint(0, a.vocab_size, (b, a.block_size), generator=g, dtype=torch.int64)
    y = torch.randint(0, a.vocab_size, (b, a.block_size), generator=g, dtype=torch.int64)
    return x, y


def time_steps(torch, a, model, x, y, zero=False):
    """Per-step (step, forward incl. loss, backward, optimizer) ms lists, CPU ms per step, last loss."""
    import torch.nn.functional as F
    opt = make_adamw(torch, model, a, x.device, zero)
    if getattr(a, "compile", False) and hasattr(torch, "compile"):
        model = torch.compile(model)
    autocast = torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=getattr(a, "precision", "fp32") == "bf16")
    step, fwd, bwd, optm = [], [], [], []
    cpu0 = 0.0
    loss = None
    def done():
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
        return time.perf_counter()

    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast:
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, a.vocab_size), y.view(-1))
        t1 = done()
        loss.backward()
        t2 = done()
        opt.step()
        t3 = done()
        if i >= a.warmup:
            step.append((t3 - t0) * 1e3)
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            optm.append((t3 - t2) * 1e3)
    return {"step": step, "fwd": fwd, "bwd": bwd, "opt": optm,
            "cpu": (time.process_time() - cpu0) * 1e3 / a.steps, "loss": float(loss)}


def keep_best(results, key, r):
    if key not in results or statistics.median(r["step"]) < statistics.median(results[key]["step"]):
        results[key] = r


def report(torch, a, results, per_rank, world):
    med = statistics.median
    nparams = sum(p.numel() for p in make_model(torch, a).parameters())
    where = f"world {world}" if a.mode == "ddp" else "one process"
    dev = torch.device(a.device)
    print(f"gpt_torch.py: torch {torch.__version__}, gpt (L={a.n_layer}, H={a.n_head}, C={a.n_embd}, V={a.vocab_size}, "
          f"T={a.block_size}): {nparams} parameters, {a.precision}, attention {a.attention_used}, "
          f"{'torch.compile, ' if a.compile and hasattr(torch, 'compile') else ''}global batch {a.batch} "
          f"({per_rank} per rank), {where}, {torch.get_num_threads()} thread(s), AdamW {adamw_kwargs(torch, a, dev)}, "
          f"{a.steps} steps (+{a.warmup} warmup) x {a.rounds} round(s)")
    compute = med(results["compute"]["step"]) if "compute" in results else None
    print(f"  {'mode':12} {'median ms':>10} {'fwd ms':>9} {'bwd ms':>9} {'opt ms':>9} {'exposed ms':>11} "
          f"{'cpu ms/step':>11} {'loss':>8}")
    for key, r in results.items():
        m = med(r["step"])
        exposed = f"{m - compute:.2f}" if not key.startswith(("compute", "single")) and compute is not None else "-"
        print(f"  {key:12} {m:10.2f} {med(r['fwd']):9.2f} {med(r['bwd']):9.2f} {med(r['opt']):9.2f} {exposed:>11} "
              f"{r['cpu']:11.2f} {r['loss']:8.4f}")
    for key, r in results.items():
        m = med(r["step"])
        mode, _, backend = key.partition("@")
        exposed = m - compute if mode not in ("compute", "single") and compute is not None else 0.0
        print(f"RESULT impl=torch mode={mode}{' backend=' + backend if backend else ''} precision={a.precision} "
              f"threads={a.threads} "
              f"world={world} per_rank_batch={per_rank} median_ms={m:.3f} min_ms={min(r['step']):.3f} "
              f"fwd_ms={med(r['fwd']):.3f} "
              f"bwd_ms={med(r['bwd']):.3f} opt_ms={med(r['opt']):.3f} exposed_ms={exposed:.3f} cpu_ms={r['cpu']:.3f}"
              f"{peak_memory(torch, a)}")
    sys.stdout.flush()


def peak_memory(torch, a):
    """ peak_mib=... on CUDA (torch.cuda.max_memory_allocated), else nothing."""
    if not a.device.startswith("cuda"):
        return ""
    return f" peak_mib={torch.cuda.max_memory_allocated(torch.device(a.device)) / 2**20:.1f}"


def run_single(a):
    import torch
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    x, y = (t.to(dev) for t in tokens(torch, a, a.batch, 0))
    results = {}
    for _ in range(a.rounds):
        keep_best(results, "single", time_steps(torch, a, make_model(torch, a).to(dev), x, y))
    report(torch, a, results, a.batch, 1)


def ddp_worker(rank, a, port):
    import torch
    if a.attention == "sdpa":
        use_sdpa(torch)  # a spawned process imports gpt_reference afresh
    dist = init_gloo(rank, a.world, port, a.threads)
    per_rank = a.batch // a.world
    x, y = tokens(torch, a, per_rank, rank)
    results = {}
    for _ in range(a.rounds):
        dist.barrier()
        keep_best(results, "compute", time_steps(torch, a, make_model(torch, a), x, y))
        dist.barrier()
        model = torch.nn.parallel.DistributedDataParallel(make_model(torch, a), bucket_cap_mb=a.bucket_cap_mb,
                                                          gradient_as_bucket_view=True)
        keep_best(results, "ddp@gloo", time_steps(torch, a, model, x, y))
        if a.zero:
            dist.barrier()
            model = torch.nn.parallel.DistributedDataParallel(make_model(torch, a), bucket_cap_mb=a.bucket_cap_mb,
                                                              gradient_as_bucket_view=True)
            keep_best(results, "zero1@gloo", time_steps(torch, a, model, x, y, zero=True))
    dist.barrier()
    if rank == 0:
        report(torch, a, results, per_rank, a.world)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab-size", "--vocab_size", type=int, default=256)
    ap.add_argument("--block-size", "--block_size", type=int, default=64)
    ap.add_argument("--n-layer", "--n_layer", type=int, default=4)
    ap.add_argument("--n-head", "--n_head", type=int, default=4)
    ap.add_argument("--n-embd", "--n_embd", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16, help="global batch; ddp splits it over --world")
    ap.add_argument("--mode", choices=["single", "ddp"], default="single")
    ap.add_argument("--device", default="cpu", help="single: cpu | cuda | cuda:N (ddp runs on the CPU)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--bucket-cap-mb", "--bucket_cap_mb", type=float, default=25.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--zero", default="", help="ddp: non-empty = also DDP + ZeroRedundancyOptimizer (zero1)")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    ap.add_argument("--adamw", choices=["single", "foreach", "fused", "best"], default="single",
                    help="AdamW implementation: single (foreach=False, psync's bit-exact twin), foreach, fused, best")
    ap.add_argument("--attention", choices=["manual", "sdpa"], default="manual",
                    help="sdpa: F.scaled_dot_product_attention where torch has it (2.0+), else the hand-written one")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch 2.0+; ignored before)")
    a, _unknown = ap.parse_known_args()  # psync-only flags (--backends, --timeout-s) are ignored
    a.attention_used = "manual"
    if a.attention == "sdpa":
        import torch
        a.attention_used = "sdpa" if use_sdpa(torch) else "manual (no scaled_dot_product_attention in this torch)"
    if a.device != "cpu" and a.mode != "single":
        ap.error("--device=cuda: only with --mode=single")
    if a.mode == "single":
        run_single(a)
        return 0
    if a.batch % a.world:
        ap.error(f"--batch={a.batch} must be divisible by --world={a.world}")
    import torch.multiprocessing as mp
    mp.spawn(ddp_worker, args=(a, free_port()), nprocs=a.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
