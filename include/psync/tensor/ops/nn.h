// Neural-network ops: softmax, losses, the GPT's layers (embedding,
// LayerNorm, GELU, causal softmax) and the CNN's (2-d convolution, max
// pooling), each with its backward. float32 anywhere, float64 on the CPU;
// the GPT's layers and cross-entropy also take bfloat16 activations
// (computed in float32; means, variances, softmax sums and losses in
// float32/double: torch.autocast's rules). Sums are taken in double in a
// fixed order, so every op returns the same bits on every run.
#pragma once

#include <array>

#include "psync/tensor/tensor.h"

namespace psync::ops {

// Row-wise log-softmax of [N,C].
Tensor LogSoftmax(const Tensor& logits);
// Mean over rows of -log_softmax(logits)[i, targets[i]]: logits [N,C],
// targets [N] int64 class indices in [0, C). Returns shape [] of the
// logits' math dtype (float32 for bfloat16 logits). On the CPU an
// index out of range throws TensorError naming the row; on CUDA it makes the
// loss NaN (the device cannot throw).
Tensor CrossEntropy(const Tensor& logits, const Tensor& targets);
// d(CrossEntropy)/d(logits) times grad (one element of the loss's dtype,
// any device): grad * (softmax(logits) - onehot(targets)) / N, in the
// logits' dtype.
Tensor CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets);
// CrossEntropy and CrossEntropyBackward in one pass over the logits (llm.c's
// fused_classifier): returns the mean loss (shape []; float32, float64 for
// float64 logits) and overwrites logits in place with its gradient times
// grad_scale, grad_scale * (softmax(row) - onehot(target)) / N, so no second
// [N, C] tensor exists. logits [N, C]: float32, bfloat16 (float32 math) or
// float64 on the CPU; rows may be strided (a [N, V] view of padded [N, Vp]
// rows: only the view's columns are read and written). The CPU gives
// CrossEntropy's and CrossEntropyBackward's bits (float32, float64) and
// checks every target before writing anything (TensorError naming the row);
// CUDA equals them to double round-off and makes a bad row's loss and
// gradient NaN.
Tensor FusedClassifier(const Tensor& logits, const Tensor& targets, float grad_scale);
// dlogits (FusedClassifier's, written for grad_scale) times grad / grad_scale,
// in place, for a backward that received `grad` (one element on dlogits'
// device): nothing when grad == grad_scale, as for the trainer's loss. The
// test runs on the device (no wait for the host).
void RescaleClassifierGrad(const Tensor& dlogits, const Tensor& grad, float grad_scale);

// ---- GPT layers

// Rows of a table: ids int64 [...] with every id in [0, V), weight [V, C]
// -> [..., C]. On the CPU an id out of range throws TensorError naming its
// position in ids; on CUDA its row of the result is NaN.
Tensor Embedding(const Tensor& ids, const Tensor& weight);
// The gradient of Embedding with respect to weight: grad [..., C] (ids'
// shape + [C]) scatter-added into [num_rows, C] by ids. Deterministic
// without float atomics: row v is the sum, in double and in increasing
// position order, of the grad rows whose id is v (0 where none is), so the
// result has the same bits on every run and on every device. `out`: a
// contiguous [num_rows, C] destination (e.g. a DDP bucket slot), or
// undefined for a new tensor; returned.
Tensor EmbeddingBackwardInto(Tensor out, const Tensor& grad, const Tensor& ids, int64_t num_rows);
Tensor EmbeddingBackward(const Tensor& grad, const Tensor& ids, int64_t num_rows);

// Over the last dim of x [..., C]: (x - mean) * rstd * weight + bias with
// rstd = 1 / sqrt(var + eps), var the biased variance (torch.nn.LayerNorm),
// computed in x's math dtype (float32 for bfloat16 x) and stored in
// out_dtype (x's dtype by default; float32 x may give a bfloat16 y for the
// matmul that reads it, and vice versa). weight, bias [C] and the mean and
// rstd ([...]) that the backward needs have x's math dtype.
struct LayerNormResult {
  Tensor y, mean, rstd;
};
LayerNormResult LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
LayerNormResult LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, DType out_dtype);
// The residual add of a transformer fused with the LayerNorm that follows
// it (llm.c's residual_layernorm): h = x + a (x the float32/float64
// residual stream, a of x's dtype or bfloat16, h rounded to x's dtype),
// then LayerNorm(h, ..., out_dtype). Bit for bit Add then LayerNorm, in one
// pass over the rows.
struct ResidualLayerNormResult {
  Tensor h, y, mean, rstd;
};
ResidualLayerNormResult ResidualLayerNorm(const Tensor& x, const Tensor& a, const Tensor& weight, const Tensor& bias,
                                          double eps, DType out_dtype);
// Gradients of LayerNorm from grad [..., C] (x's dtype, or bfloat16/float32
// with float32/bfloat16 x) and the forward's x, weight, mean and rstd. dx
// has x's dtype; with residual_grad (x's shape and dtype), dx =
// residual_grad + the LayerNorm's dx (the gradient of ResidualLayerNorm's
// h, which also feeds the next residual add). dweight/dbias: contiguous [C]
// destinations of x's math dtype or undefined (new tensors); all three are
// always computed.
struct LayerNormGrads {
  Tensor dx, dweight, dbias;
};
LayerNormGrads LayerNormBackward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd, Tensor dweight_out = Tensor(), Tensor dbias_out = Tensor(),
                                 const Tensor& residual_grad = Tensor());

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) elementwise (torch's
// gelu(approximate="tanh")), evaluated as x / (1 + exp(-2 sqrt(2/pi) (...)))
// (the same function, without tanh's cancellation for negative x).
Tensor Gelu(const Tensor& x);
// grad * gelu'(x), x the forward's input, in x's dtype (grad: x's dtype,
// or float32/bfloat16 with bfloat16/float32 x).
Tensor GeluBackward(const Tensor& grad, const Tensor& x);

// scores [..., T, T] -> [..., T, T]: row i of each [T, T] matrix is
// softmax(scale * scores[i, 0..i]) followed by zeros for j > i (the causal
// mask of self-attention).
Tensor CausalSoftmax(const Tensor& scores, double scale);
// d(scores) from grad and the forward's result probs (both [..., T, T]).
Tensor CausalSoftmaxBackward(const Tensor& grad, const Tensor& probs, double scale);

// ---- CNN layers (ops/nn_conv.cc)

// 2-d convolution (cross-correlation, as torch.nn.functional.conv2d):
// x [N, Cin, H, W], weight [Cout, Cin, kh, kw], bias [Cout] or undefined
// (none) -> y [N, Cout, Ho, Wo], Ho = (H + 2 padding - kh) / stride + 1 (and
// Wo alike), zero padding. y[n, o] = sum over (c, i, j) of weight[o, c, i, j]
// * x[n, c, oh*stride - padding + i, ow*stride - padding + j], then + bias[o].
// Computed as im2col + one matrix product per image (OpenBLAS / cuBLAS in
// FP32, no TF32): the same bits on every run.
Tensor Conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1, int64_t padding = 0);
// Gradients of Conv2d from grad [N, Cout, Ho, Wo] and the forward's x and
// weight; only those asked for in `needed` ({dx, dweight, dbias}) are
// computed (the others stay undefined). dx: W^T times grad per image, then
// col2im (each element's contributions added in a fixed order); dweight:
// grad times im2col(x)^T per image, the per-image products summed in image
// order in double; dbias: the sums of grad per channel in double. No float
// atomics: the same bits on every run. dweight_out/dbias_out: contiguous
// destinations (e.g. DDP bucket slots) or undefined (new tensors).
struct Conv2dGrads {
  Tensor dx, dweight, dbias;
};
Conv2dGrads Conv2dBackward(const Tensor& grad, const Tensor& x, const Tensor& weight, int64_t stride, int64_t padding,
                           std::array<bool, 3> needed = {true, true, true}, Tensor dweight_out = Tensor(),
                           Tensor dbias_out = Tensor());

// Max pooling over k x k windows at stride k (non-overlapping, no padding;
// torch's max_pool2d(x, k) with its default floor mode): x [N, C, H, W] ->
// y [N, C, H / k, W / k] and, for the backward, indices (int64, same shape):
// the position h * W + w of each window's max within its [H, W] plane (the
// first max in row-major order; NaN propagates), as torch returns them.
struct MaxPool2dResult {
  Tensor y, indices;
};
MaxPool2dResult MaxPool2d(const Tensor& x, int64_t kernel);
// dx [input_shape] = grad at the forward's indices, 0 elsewhere (windows do
// not overlap: each element gets at most one gradient, nothing is summed).
Tensor MaxPool2dBackward(const Tensor& grad, const Tensor& indices, int64_t kernel, const Shape& input_shape);

}  // namespace psync::ops
