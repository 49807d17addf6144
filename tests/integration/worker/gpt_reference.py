#!/usr/bin/env python3
"""PyTorch reference of psync-worker's GPT training contract (issue: --model=gpt).

    gpt_reference.py make-inputs --vocab-size 256 --block-size 16 --n-layer 2 --n-head 2 --n-embd 32
        --tokens 20000 --seed 1 --init I.st --data D.bin [--data-format bytes|tokens]
    gpt_reference.py train --init I.st --data D.bin [--data-format bytes|tokens] --world-size W
        --global-batch B --accumulate M --steps K --lr LR [--lr-schedule cosine --warmup-steps N]
        [--beta1 --beta2 --eps --weight-decay] [--clip-grad-norm X]
        [--skip-block J --skip-pattern always|odd|lastmicro] [--precision fp32|bf16] --out OUT.st

One process on the full batch, emulating what W ranks with M micro-batches
each compute (the contract in docs/cli-contract.md):
  * step s, sequence k < B starts at o = ((s*B + k) * T) mod (N - T): input
    tok[o:o+T], target tok[o+1:o+T+1]; rank r owns sequences [r*B/W, (r+1)*B/W),
    micro-batch m is the m-th contiguous slice of those;
  * a micro-batch's loss is the mean cross-entropy over its positions / M;
    gradients are summed over micro-batches and averaged over ranks;
  * block J is skipped where the pattern says (always; odd steps; only the
    last micro-batch); a parameter that got no gradient in a step keeps
    grad None and AdamW leaves it (and its step count) alone;
  * AdamW (torch.optim.AdamW) with weight decay on parameters of 2+ dims
    only; clip_grad_norm_ over the parameters that have a gradient; the
    learning rate of step s is the schedule's (constant, or cosine with
    linear warmup down to 0.1*lr over --steps).
  * --precision=bf16: forward and loss under torch.autocast("cpu",
    torch.bfloat16) (linear and matmul in bfloat16, LayerNorm of the float32
    residual stream and cross-entropy in float32, the rest in its input's
    dtype), parameters, gradients and AdamW in float32: psync's bf16 step
    (include/psync/nn/precision.h) up to where each rounds.
The GPT: wte + wpe, pre-LayerNorm blocks (causal self-attention, GELU-tanh
MLP), ln_f, head tied to wte. Safetensors go through tests/common/safetensors_io.py.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402  (tests/common)
from worker_contract import skip_active  # noqa: E402  (tests/common)


def read_tokens(path, fmt):
    import numpy as np
    raw = open(path, "rb").read()
    if fmt == "bytes":
        return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).astype(np.int64))
    header = np.frombuffer(raw[:1024], dtype=np.int32)
    assert header[0] == 20240520 and header[1] == 1, "not an llm.c token file"
    n = int(header[2])
    return torch.from_numpy(np.frombuffer(raw[1024:1024 + 2 * n], dtype=np.uint16).astype(np.int64))


class Block(torch.nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = torch.nn.LayerNorm(C, eps=1e-5)
        self.attn = torch.nn.Module()
        self.attn.c_attn = torch.nn.Linear(C, 3 * C)
        self.attn.c_proj = torch.nn.Linear(C, C)
        self.ln_2 = torch.nn.LayerNorm(C, eps=1e-5)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc = torch.nn.Linear(C, 4 * C)
        self.mlp.c_proj = torch.nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        hs = C // self.H
        q, k, v = self.attn.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.attn.c_proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, V, T, L, H, C):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(T, C)
        self.h = torch.nn.ModuleList([Block(C, H) for _ in range(L)])
        self.ln_f = torch.nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, skip=()):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for i, block in enumerate(self.h):
            if i not in skip:
                x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def config_from(state):
    V, C = state["wte.weight"].shape
    T = state["wpe.weight"].shape[0]
    L = len({k.split(".")[1] for k in state if k.startswith("h.")})
    return V, T, L, C


def lr_at(args, s):
    if args.lr_schedule == "constant":
        return args.lr
    W, K = args.warmup_steps, args.steps
    if s < W:
        return args.lr * (s + 1) / W
    lr_min = 0.1 * args.lr
    return lr_min + 0.5 * (1 + math.cos(math.pi * (s - W) / max(1, K - W))) * (args.lr - lr_min)


def make_inputs(args):
    torch.manual_seed(args.seed)
    V, T, L, H, C = args.vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd
    model = GPT(V, T, L, H, C)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * L))
            elif name.startswith("ln") or ".ln_" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)  # not the identity: a real check
            elif name.endswith("bias"):
                p.normal_(0.0, 0.02)
            else:
                p.normal_(0.0, 0.02)
    write_safetensors(args.init, dict(model.named_parameters()))
    # Tokens: a little structure (so the loss moves) plus noise.
    g = torch.Generator().manual_seed(args.seed + 1)
    base = torch.randint(0, V, (97,), generator=g)
    noise = torch.randint(0, V, (args.tokens,), generator=g)
    keep = torch.rand(args.tokens, generator=g) < 0.7
    toks = torch.where(keep, base[torch.arange(args.tokens) % 97], noise)
    if args.data_format == "bytes":
        assert V <= 256
        open(args.data, "wb").write(bytes(toks.to(torch.uint8).tolist()))
    else:
        import numpy as np
        header = np.zeros(256, dtype=np.int32)
        header[:3] = [20240520, 1, args.tokens]
        open(args.data, "wb").write(header.tobytes() + toks.numpy().astype(np.uint16).tobytes())


def micro_batch(toks, T, s, r, m, B, W, M):
    """(inputs, targets) [B/(W*M), T] of step s, rank r, micro-batch m: the
    token data contract in this file's docstring."""
    assert B % (W * M) == 0
    per_rank, per_micro = B // W, B // (W * M)
    N = toks.numel()
    ks = range(r * per_rank + m * per_micro, r * per_rank + (m + 1) * per_micro)
    starts = [((s * B + k) * T) % (N - T) for k in ks]
    return (torch.stack([toks[o:o + T] for o in starts]), torch.stack([toks[o + 1:o + T + 1] for o in starts]))


def adamw(model, args):
    """torch.optim.AdamW as psync's: weight decay on parameters of 2+ dims only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)


def train(args):
    state = read_safetensors(args.init)
    V, T, L, C = config_from(state)
    H = args.n_head
    model = GPT(V, T, L, H, C)
    model.load_state_dict(state)
    toks = read_tokens(args.data, args.data_format)
    W, M = args.world_size, args.accumulate
    opt = adamw(model, args)
    for s in range(args.steps):
        opt.zero_grad(set_to_none=True)
        for r in range(W):
            for m in range(M):
                x, y = micro_batch(toks, T, s, r, m, args.global_batch, W, M)
                skip = (args.skip_block,) if skip_active(args.skip_pattern, args.skip_block, s, m, M) else ()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                    logits = model(x, skip)
                    loss = F.cross_entropy(logits.view(-1, V), y.view(-1)) / M
                loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                p.grad /= W
        if args.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], args.clip_grad_norm)
        for group in opt.param_groups:
            group["lr"] = lr_at(args, s)
        opt.step()
    write_safetensors(args.out, dict(model.named_parameters()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["make-inputs", "train"])
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=32)
    p.add_argument("--tokens", type=int, default=20000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--init", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--data-format", default="bytes", choices=["bytes", "tokens"])
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine"])
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--clip-grad-norm", type=float, default=0.0)
    p.add_argument("--skip-block", type=int, default=-1)
    p.add_argument("--skip-pattern", default="always", choices=["always", "odd", "lastmicro"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--out")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.cmd == "make-inputs":
        make_inputs(args)
    else:
        train(args)


if __name__ == "__main__":
    sys.exit(main())
