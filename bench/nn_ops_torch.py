#!/usr/bin/python3
"""Twin of psync-nn-ops-bench: the GPT and CNN layer ops in PyTorch 1.13,
forward and backward (the aten backward functions autograd calls), one
thread. The causal softmax is nanoGPT's: att * scale, masked_fill(mask == 0,
-inf), softmax; its backward is softmax's, masked_fill's and mul's. The
convolutions are F.conv2d and aten.convolution_backward with the output mask
training uses (conv1, the first layer: weight and bias only), once as torch
runs them (oneDNN, where the build has it) and once with oneDNN off
(*_im2col rows: torch's im2col + BLAS path, psync's algorithm); the pooling
is max_pool2d with indices (what autograd saves) and its backward."""
import argparse, math, time
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
for name, default in [("batch", 16), ("block", 64), ("embd", 128), ("heads", 4), ("vocab", 256), ("images", 64),
                      ("reps", 200)]:
    p.add_argument(f"--{name}", type=int, default=default)
a = p.parse_args()
torch.set_num_threads(1)
B, T, C, H, V, N = a.batch, a.block, a.embd, a.heads, a.vocab, a.images
print(f"nn_ops_torch.py: B={B} T={T} C={C} H={H} V={V} images={N}, float32, cpu, 1 thread, torch {torch.__version__}, "
      f"mkldnn {torch.backends.mkldnn.is_available()}")

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

def rand(*shape, lo=-1.0, hi=1.0):
    return torch.rand(*shape) * (hi - lo) + lo
def conv_bwd(g, x, w, mask):
    return torch.ops.aten.convolution_backward(g, x, w, [w.shape[0]], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)
x1 = rand(N, 1, 28, 28, lo=0.0); w1 = rand(16, 1, 3, 3); b1 = rand(16); g1 = rand(N, 16, 28, 28)
time_op("conv1_fwd", lambda: F.conv2d(x1, w1, b1, padding=1))
time_op("conv1_bwd", lambda: conv_bwd(g1, x1, w1, [False, True, True]))
x2 = rand(N, 16, 14, 14); w2 = rand(32, 16, 3, 3); b2 = rand(32); g2 = rand(N, 32, 14, 14)
time_op("conv2_fwd", lambda: F.conv2d(x2, w2, b2, padding=1))
time_op("conv2_bwd", lambda: conv_bwd(g2, x2, w2, [True, True, True]))
xa = rand(N, 16, 28, 28); ga = rand(N, 16, 14, 14)
_, idx = F.max_pool2d(xa, 2, return_indices=True)
# torch's own im2col + BLAS path (oneDNN off), the algorithm psync uses.
with torch.backends.mkldnn.flags(enabled=False):
    time_op("conv1_fwd_im2col", lambda: F.conv2d(x1, w1, b1, padding=1))
    time_op("conv1_bwd_im2col", lambda: conv_bwd(g1, x1, w1, [False, True, True]))
    time_op("conv2_fwd_im2col", lambda: F.conv2d(x2, w2, b2, padding=1))
    time_op("conv2_bwd_im2col", lambda: conv_bwd(g2, x2, w2, [True, True, True]))
time_op("maxpool_fwd", lambda: F.max_pool2d(xa, 2, return_indices=True))
time_op("maxpool_bwd", lambda: torch.ops.aten.max_pool2d_with_indices_backward(ga, xa, [2, 2], [2, 2], [0, 0], [1, 1], False, idx))
