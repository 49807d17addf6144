#!/usr/bin/python3
"""Twin of psync-nn-ops-bench: the GPT layer ops in PyTorch 1.13, forward and
backward (the aten backward functions autograd calls), one thread. The causal
softmax is nanoGPT's: att * scale, masked_fill(mask == 0, -inf), softmax; its
backward is softmax's, masked_fill's and mul's."""
import argparse, math, time
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
for name, default in [("batch", 16), ("block", 64), ("embd", 128), ("heads", 4), ("vocab", 256), ("reps", 200)]:
    p.add_argument(f"--{name}", type=int, default=default)
a = p.parse_args()
torch.set_num_threads(1)
B, T, C, H, V = a.batch, a.block, a.embd, a.heads, a.vocab
print(f"nn_ops_torch.py: B={B} T={T} C={C} H={H} V={V}, float32, cpu, 1 thread, torch {torch.__version__}")

def time_op(op, fn):
    for _ in range(5):
        fn()
    us = []
    for _ in range(a.reps):
        t0 = time.perf_counter(); fn(); us.append((time.perf_counter() - t0) * 1e6)
    us.sort()
    print(f"{op:<20} min {us[0]:9.1f} us   median {us[len(us) // 2]:9.1f} us")
    print(f"RESULT impl=torch op={op} min_us={us[0]:.1f} median_us={us[len(us) // 2]:.1f}")

ids = torch.randint(0, V, (B, T)); wte = torch.rand(V, C) * 2 - 1; gx = torch.rand(B, T, C) * 2 - 1
time_op("embedding_fwd", lambda: F.embedding(ids, wte))
time_op("embedding_bwd", lambda: torch.ops.aten.embedding_dense_backward(gx, ids, V, -1, False))

x = torch.rand(B, T, C) * 2 - 1; w = torch.rand(C) * 2 - 1; b = torch.rand(C) * 2 - 1
_, mean, rstd = torch.native_layer_norm(x, (C,), w, b, 1e-5)
time_op("layernorm_fwd", lambda: torch.native_layer_norm(x, (C,), w, b, 1e-5))
time_op("layernorm_bwd", lambda: torch.ops.aten.native_layer_norm_backward(gx, x, (C,), mean, rstd, w, b, [True, True, True]))

h = torch.rand(B, T, 4 * C) * 6 - 3; gh = torch.rand(B, T, 4 * C) * 2 - 1
time_op("gelu_fwd", lambda: F.gelu(h, approximate="tanh"))
time_op("gelu_bwd", lambda: torch.ops.aten.gelu_backward(gh, h, approximate="tanh"))

s = torch.rand(B, H, T, T) * 6 - 3; gs = torch.rand(B, H, T, T) * 2 - 1
scale = 1.0 / math.sqrt(C // H)
mask = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
def sm_fwd():
    return F.softmax((s * scale).masked_fill(mask == 0, float("-inf")), dim=-1)
y = sm_fwd()
def sm_bwd():
    g = torch.ops.aten._softmax_backward_data(gs, y, -1, torch.float32)
    return g.masked_fill(mask == 0, 0.0) * scale
time_op("causal_softmax_fwd", sm_fwd)
time_op("causal_softmax_bwd", sm_bwd)
