// Differentiable neural-network functions of the GPT (llm.c's layers):
// token embedding, LayerNorm, GELU (tanh form), causal softmax, fused causal
// attention; and of the
// CNN: 2-d convolution and max pooling. Each has a forward and backward
// kernel on CPU and CUDA (ops/nn.h) and a float64 finite-difference check
// (tests/unit/autograd).
#pragma once

#include <utility>

#include "psync/autograd/variable.h"

namespace psync::autograd {

// ids int64 [...] (each in [0, V)), weight [V, C] -> [..., C]: rows of weight.
// Backward scatter-adds into weight's gradient deterministically (a fixed
// order per row: the same bits every run, on every device).
Variable Embedding(const Tensor& ids, const Variable& weight);
// Over the last dim: (x - mean) / sqrt(var + eps) * weight + bias, var the
// biased variance (as torch.nn.LayerNorm); weight and bias [C].
Variable LayerNorm(const Variable& x, const Variable& weight, const Variable& bias, double eps = 1e-5);
// The same with the result in out_dtype (a bfloat16 y for the matmul that
// reads it, from a float32 x: computed in float32, rounded once).
Variable LayerNorm(const Variable& x, const Variable& weight, const Variable& bias, double eps, DType out_dtype);
// A transformer's residual add fused with the LayerNorm after it: returns
// {h = x + a, y = LayerNorm(h) in out_dtype}; x is the float32 residual
// stream, a (x's dtype or bfloat16) the block's output. The same values
// as Add then LayerNorm, in one pass (ops::ResidualLayerNorm); h's gradient
// and the LayerNorm's are summed inside one backward kernel.
std::pair<Variable, Variable> ResidualLayerNorm(const Variable& x, const Variable& a, const Variable& weight,
                                                const Variable& bias, double eps, DType out_dtype);
// The weights of a transformer MLP: fc [H, C] + bias [H], proj [C', H] +
// bias [C']. *_value: the tensor each product reads (the weight's bfloat16
// copy in a bf16 step; undefined = the weight's data).
struct MlpParams {
  Variable fc_weight, fc_bias, proj_weight, proj_bias;
  Tensor fc_value, proj_value;
};
// proj(gelu(fc(x))), x [..., C] -> [..., C'], in one autograd node: the
// first product with the bias+GELU epilogue, the backward's first product
// with the GELU-backward epilogue (cuBLASLt's GELU_AUX_BIAS / DGELU on
// CUDA; on the CPU in float32 the exact bits of Linear, Gelu, Linear).
Variable Mlp(const Variable& x, const MlpParams& params);
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), torch's gelu(approximate="tanh").
Variable Gelu(const Variable& x);
// scores [..., T, T]: softmax over the last dim of scale * scores with every
// position j > i (the future) masked out (probability 0), as in causal
// self-attention.
Variable CausalSoftmax(const Variable& scores, double scale);
// q, k, v [B, H, T, D] (any strides, e.g. the head views of the qkv
// projection: no copy) -> softmax(scale q k^T, future masked) v, [B, H, T, D]
// laid out in memory as [B, T, H, D] (so joining the heads is a view). Fused
// and flash-style (ops/attention.h): saves q, k, v, the output and the
// log-sum-exp [B, H, T], never the [T, T] probabilities, which the backward
// recomputes tile by tile. dq, dk, dv come in the output's layout.
// deterministic: see ops::CausalAttentionBackward.
Variable CausalAttention(const Variable& q, const Variable& k, const Variable& v, double scale,
                         bool deterministic = true);

// x [N, Cin, H, W], weight [Cout, Cin, kh, kw], bias [Cout] (or an undefined
// Variable: no bias) -> [N, Cout, Ho, Wo], as torch.nn.functional.conv2d
// with zero padding. Saves x only when weight needs a gradient and weight
// only when x does; weight and bias gradients go into their leaves'
// gradient destinations.
Variable Conv2d(const Variable& x, const Variable& weight, const Variable& bias, int64_t stride = 1,
                int64_t padding = 0);
// x [N, C, H, W] -> [N, C, H / k, W / k]: the max of each k x k window at
// stride k (torch's max_pool2d(x, k)). Saves the argmax indices (int64)
// only; the backward routes each gradient to its window's max.
Variable MaxPool2d(const Variable& x, int64_t kernel);

}  // namespace psync::autograd
