// Neural-network ops: softmax, losses and the GPT's layers (embedding,
// LayerNorm, GELU, causal softmax), each with its backward. float32
// anywhere, float64 on the CPU. Sums are taken in double in a fixed order,
// so every op returns the same bits on every run.
#pragma once

#include "worker/tensor/tensor.h"

namespace psync::ops {

// Row-wise log-softmax of [N,C].
Tensor LogSoftmax(const Tensor& logits);
// Mean over rows of -log_softmax(logits)[i, targets[i]]: logits [N,C],
// targets [N] int64 class indices in [0, C). Returns shape []. On the CPU an
// index out of range throws TensorError naming the row; on CUDA it makes the
// loss NaN (the device cannot throw).
Tensor CrossEntropy(const Tensor& logits, const Tensor& targets);
// d(CrossEntropy)/d(logits) times grad (one element, any device):
// grad * (softmax(logits) - onehot(targets)) / N.
Tensor CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets);

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
// rstd = 1 / sqrt(var + eps), var the biased variance (torch.nn.LayerNorm).
// mean and rstd ([...], x's dtype) are what the backward needs.
struct LayerNormResult {
  Tensor y, mean, rstd;
};
LayerNormResult LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// Gradients of LayerNorm from grad [..., C] and the forward's x, weight,
// mean and rstd. dweight/dbias: contiguous [C] destinations or undefined
// (new tensors); all three are always computed.
struct LayerNormGrads {
  Tensor dx, dweight, dbias;
};
LayerNormGrads LayerNormBackward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd, Tensor dweight_out = Tensor(), Tensor dbias_out = Tensor());

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) elementwise (torch's
// gelu(approximate="tanh")), evaluated as x / (1 + exp(-2 sqrt(2/pi) (...)))
// (the same function, without tanh's cancellation for negative x).
Tensor Gelu(const Tensor& x);
// grad * gelu'(x), x the forward's input.
Tensor GeluBackward(const Tensor& grad, const Tensor& x);

// scores [..., T, T] -> [..., T, T]: row i of each [T, T] matrix is
// softmax(scale * scores[i, 0..i]) followed by zeros for j > i (the causal
// mask of self-attention).
Tensor CausalSoftmax(const Tensor& scores, double scale);
// d(scores) from grad and the forward's result probs (both [..., T, T]).
Tensor CausalSoftmaxBackward(const Tensor& grad, const Tensor& probs, double scale);

}  // namespace psync::ops
