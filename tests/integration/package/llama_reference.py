#!/usr/bin/env python3
"""PyTorch reference of examples/llama (--model=llama), for package_test.sh's llama case.

    llama_reference.py --init I.st --data D.bin [--data-format bytes|tokens] --block-size T
        --n-head H --world-size W --global-batch B [--accumulate M] --steps K --lr LR
        [--beta1 --beta2 --eps --weight-decay] [--rope-theta X] --out OUT.st

One process on the full batch does what W psync ranks do (docs/cli-contract.md
and gpt_reference.py, whose data reader this imports): step s, sequence k
starts at ((s*B + k) * T) mod (N - T); rank r owns sequences [r*B/W, (r+1)*B/W),
micro-batch m the m-th slice of those; a micro-batch's loss is its mean
cross-entropy / M; gradients are summed over micro-batches and averaged over
ranks; torch.optim.AdamW with weight decay on 2+-dim parameters only.

The model is written by hand (torch 1.13 has no RMSNorm and no
scaled_dot_product_attention), as HF's LlamaForCausalLM computes it: RMSNorm
w * (x * rsqrt(mean(x^2) + eps)), RoPE in the rotate_half form, grouped-query
attention by repeat_interleave of the k/v heads, causal softmax(q k^T / sqrt(D)),
SwiGLU MLP, untied head, no biases. Its configuration is read off the
weights' shapes (V, C, L, F, KV heads) plus --n-head and --block-size.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "worker"))
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402  (tests/common)
from gpt_reference import adamw, micro_batch, read_tokens  # noqa: E402  (psync's data contract and AdamW)


class RMSNorm(torch.nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_tables(T, D, theta):
    """cos, sin [T, D] as cat(f, f): angles in float64, rounded once (as the C++ does)."""
    i = torch.arange(0, D, 2, dtype=torch.float64)
    ang = torch.arange(T, dtype=torch.float64)[:, None] / theta ** (i / D)[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, C, H, KV, F_, theta):
        super().__init__()
        self.H, self.KV, self.D, self.theta = H, KV, C // H, theta
        self.input_layernorm = RMSNorm(C)
        self.self_attn = torch.nn.Module()
        self.self_attn.q_proj = torch.nn.Linear(C, H * self.D, bias=False)
        self.self_attn.k_proj = torch.nn.Linear(C, KV * self.D, bias=False)
        self.self_attn.v_proj = torch.nn.Linear(C, KV * self.D, bias=False)
        self.self_attn.o_proj = torch.nn.Linear(H * self.D, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C)
        self.mlp = torch.nn.Module()
        self.mlp.gate_proj = torch.nn.Linear(C, F_, bias=False)
        self.mlp.up_proj = torch.nn.Linear(C, F_, bias=False)
        self.mlp.down_proj = torch.nn.Linear(F_, C, bias=False)

    def attention(self, x):
        B, T, C = x.shape
        a = self.self_attn
        q = a.q_proj(x).view(B, T, self.H, self.D).transpose(1, 2)    # [B, H, T, D]
        k = a.k_proj(x).view(B, T, self.KV, self.D).transpose(1, 2)   # [B, KV, T, D]
        v = a.v_proj(x).view(B, T, self.KV, self.D).transpose(1, 2)
        cos, sin = rope_tables(T, self.D, self.theta)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.H // self.KV, dim=1)              # kv head j serves q heads j*G..j*G+G-1
        v = v.repeat_interleave(self.H // self.KV, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.D))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return a.o_proj(y)

    def forward(self, x):
        x = x + self.attention(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        return x + self.mlp.down_proj(F.silu(self.mlp.gate_proj(h)) * self.mlp.up_proj(h))


class Llama(torch.nn.Module):
    def __init__(self, V, C, L, H, KV, F_, theta):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(V, C)
        self.layers = torch.nn.ModuleList([Layer(C, H, KV, F_, theta) for _ in range(L)])
        self.norm = RMSNorm(C)
        self.lm_head = torch.nn.Linear(C, V, bias=False)

    def forward(self, idx):
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--init", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--data-format", default="bytes", choices=["bytes", "tokens"])
    p.add_argument("--block-size", type=int, required=True)
    p.add_argument("--n-head", type=int, required=True)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--beta1", type=float, default=0.9)   # psync-worker's defaults
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)

    state = read_safetensors(args.init)
    V, C = state["embed_tokens.weight"].shape
    L = len({k.split(".")[1] for k in state if k.startswith("layers.")})
    F_ = state["layers.0.mlp.gate_proj.weight"].shape[0]
    KV = state["layers.0.self_attn.k_proj.weight"].shape[0] // (C // args.n_head)
    model = Llama(V, C, L, args.n_head, KV, F_, args.rope_theta)
    model.load_state_dict(state)  # strict: every name and shape must match psync's

    toks = read_tokens(args.data, args.data_format)
    W, M = args.world_size, args.accumulate
    opt = adamw(model, args)
    for s in range(args.steps):
        opt.zero_grad(set_to_none=True)
        for r in range(W):
            for m in range(M):
                x, y = micro_batch(toks, args.block_size, s, r, m, args.global_batch, W, M)
                loss = F.cross_entropy(model(x).view(-1, V), y.view(-1)) / M
                loss.backward()
        for q in model.parameters():
            q.grad /= W
        opt.step()
        print(f"step {s + 1} loss {loss.item() * M:.6f} (rank {W - 1}'s last micro-batch)")
    write_safetensors(args.out, dict(model.named_parameters()))


if __name__ == "__main__":
    sys.exit(main())
