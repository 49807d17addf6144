#!/usr/bin/python3
"""PyTorch side of tests/unit/optim/optim_torch_test.cc.

Usage: torch_optim_reference.py IN OUT [IN OUT ...] (one run per pair, one
torch import for all). Reads IN (safetensors written by the test): the config as JSON in the
metadata entry "config", initial parameters "param.<name>" and the gradient
of each step "grad.<step>.<name>" (absent: the parameter has no grad that
step, p.grad = None). Runs torch.optim.AdamW or torch.optim.SGD exactly as
psync's contract says (foreach=False; AdamW decays only parameters with two
or more dimensions, through a second param group with weight_decay 0), with
torch.nn.utils.clip_grad_norm_ before each step when "clip" > 0, at the
learning rate the issue's schedule formula gives for each step. Writes OUT:
final "param.<name>", the optimizer state "state.<name>.<buffer>" and
"state.<name>.step" (I64), the clip norms "norm" and the rates "lr" (F64).
"""
import json
import math
import os
import sys

import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402  (tests/common)


def schedule_lr(cfg, s):
    """The issue's formula, evaluated in this order."""
    lr, W, K = cfg["lr"], cfg["warmup"], cfg["steps"]
    if s < W:
        return lr * (s + 1) / W
    if cfg["schedule"] == "constant":
        return lr
    lr_min = 0.1 * lr
    return lr_min + 0.5 * (1 + math.cos(math.pi * (s - W) / max(1, K - W))) * (lr - lr_min)


def run(inp, out_path):
    tensors, meta = read_safetensors(inp, with_metadata=True)
    cfg = json.loads(meta["config"])
    names = cfg["params"]
    params = [torch.nn.Parameter(tensors["param." + n].clone()) for n in names]
    if cfg["optimizer"] == "adamw":
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"], foreach=False)
        buffers = ["exp_avg", "exp_avg_sq"]
    else:
        opt = torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"], weight_decay=cfg["weight_decay"],
                              foreach=False)
        buffers = ["momentum_buffer"] if cfg["momentum"] != 0 else []
    norms, lrs = [], []
    for s in range(cfg["steps"]):
        for n, p in zip(names, params):
            g = tensors.get("grad.%d.%s" % (s, n))
            p.grad = None if g is None else g.clone()
        if cfg["clip"] > 0:
            with_grad = [p for p in params if p.grad is not None]
            norms.append(float(torch.nn.utils.clip_grad_norm_(with_grad, cfg["clip"])))
        lr = schedule_lr(cfg, s)
        lrs.append(lr)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    out = {}
    for n, p in zip(names, params):
        out["param." + n] = p.data
        st = opt.state.get(p, {})
        step = st.get("step", 0)
        out["state.%s.step" % n] = torch.tensor(int(step.item() if torch.is_tensor(step) else step), dtype=torch.int64)
        for b in buffers:
            buf = st.get(b)
            out["state.%s.%s" % (n, b)] = buf if buf is not None else torch.zeros_like(p.data)
    out["norm"] = torch.tensor(norms, dtype=torch.float64)
    out["lr"] = torch.tensor(lrs, dtype=torch.float64)
    write_safetensors(out_path, out)


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit("usage: torch_optim_reference.py IN OUT [IN OUT ...]")
    for i in range(0, len(args), 2):
        run(args[i], args[i + 1])
