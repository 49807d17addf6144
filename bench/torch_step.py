#!/usr/bin/python3
"""PyTorch twin of psync-step-bench: the same MLP (Linear + ReLU between
layers, none after the last), MSE loss, backward and plain SGD, with the same
batch and thread count; prints ms per step and a RESULT line.

  /usr/bin/python3 bench/torch_step.py --widths=1024,4096,4096,1024 --batch=256 --threads=2
"""
import argparse
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default="1024,4096,4096,1024")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = leave default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    try:
        widths = [int(w) for w in a.widths.split(",")]
        assert len(widths) >= 2 and all(w > 0 for w in widths)
    except (ValueError, AssertionError):
        print(f"torch_step.py: --widths: {a.widths!r} is not a list of >= 2 positive integers", file=sys.stderr)
        return 2

    import torch
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.batch, widths[0], generator=g).to(dev)
    y = torch.randn(a.batch, widths[-1], generator=g).to(dev)
    nparams = sum(p.numel() for p in model.parameters())

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    ms = []
    loss = None
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        sync()
        t1 = time.perf_counter()
        if i >= a.warmup:
            ms.append((t1 - t0) * 1e3)
            if a.verbose:
                print(f"step {i - a.warmup}: {ms[-1]:.3f} ms")
    med, mean = statistics.median(ms), statistics.fmean(ms)
    print(f"torch_step.py: torch {torch.__version__}, MLP {a.widths} ({nparams} params), batch {a.batch}, "
          f"device {dev}, threads {torch.get_num_threads()}, {a.steps} steps (+{a.warmup} warmup)")
    print(f"  median {med:.3f} ms/step, mean {mean:.3f} ms/step, min {min(ms):.3f}, max {max(ms):.3f}, "
          f"final loss {loss.item():.6g}")
    print(f"RESULT impl=torch median_ms={med:.3f} mean_ms={mean:.3f} min_ms={min(ms):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
