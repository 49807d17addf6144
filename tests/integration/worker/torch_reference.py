#!/usr/bin/env python3
"""PyTorch reference for psync-worker's training contract.

    torch_reference.py make-inputs --widths 32,64,64,16 --rows 256 --seed 1 --init I.st --data D.st
    torch_reference.py train --widths ... --init I.st --data D.st --world-size W --global-batch B
        --accumulate M --steps K --lr LR [--momentum] [--weight-decay] [--skip-layer J --skip-pattern P]
        --out OUT.st

The contract (docs and worker/runtime/trainer.h): MLP of Linear layers with
bias, ReLU after every layer but the last; step s uses global rows
(s*B + k) mod N; rank r takes [r*B/W, (r+1)*B/W); micro-batch m of it is
[m*B/(W*M), (m+1)*B/(W*M)); a micro-batch's loss is mse/M; gradients are
averaged over ranks (sum over ranks and micro-batches / W); a parameter
that got no gradient in a step (skipped layer) keeps grad None and is not
updated; plain torch.optim.SGD. Safetensors go through
tests/common/safetensors_io.py (no safetensors package needed).
"""
import argparse
import os
import sys

import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402  (tests/common)
from worker_contract import skip_active  # noqa: E402  (tests/common)


class MLP(torch.nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [torch.nn.Linear(widths[i], widths[i + 1]) for i in range(len(widths) - 1)])

    def forward(self, x, skip=()):
        n = len(self.layers)
        for i, layer in enumerate(self.layers):
            if i in skip:
                continue
            x = layer(x)
            if i + 1 < n:
                x = torch.relu(x)
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["make-inputs", "train"])
    ap.add_argument("--widths", default="32,64,64,16")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--init", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--accumulate", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--skip-layer", type=int, default=-1)
    ap.add_argument("--skip-pattern", default="always")
    ap.add_argument("--out")
    a = ap.parse_args()
    widths = [int(w) for w in a.widths.split(",")]
    torch.manual_seed(a.seed)

    if a.mode == "make-inputs":
        model = MLP(widths)
        write_safetensors(a.init, {k: v for k, v in model.state_dict().items()})
        x = torch.rand(a.rows, widths[0]) * 2 - 1
        teacher = torch.randn(widths[-1], widths[0]) / widths[0] ** 0.5
        y = torch.sin(x @ teacher.T) + 0.05 * torch.randn(a.rows, widths[-1])
        write_safetensors(a.data, {"x": x, "y": y})
        return 0

    model = MLP(widths)
    model.load_state_dict(read_safetensors(a.init))
    data = read_safetensors(a.data)
    x_all, y_all = data["x"], data["y"]
    n = x_all.shape[0]
    B, W, M = a.global_batch, a.world_size, a.accumulate
    assert B % (W * M) == 0
    micro = B // (W * M)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    for s in range(a.steps):
        opt.zero_grad(set_to_none=True)
        for r in range(W):
            for m in range(M):
                k0 = r * (B // W) + m * micro
                rows = [(s * B + k0 + i) % n for i in range(micro)]
                skip = (a.skip_layer,) if skip_active(a.skip_pattern, a.skip_layer, s, m, M) else ()
                out = model(x_all[rows], skip)
                loss = torch.nn.functional.mse_loss(out, y_all[rows]) / M
                loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                p.grad /= W
        opt.step()
    write_safetensors(a.out, {k: v for k, v in model.state_dict().items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
