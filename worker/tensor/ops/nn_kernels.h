// Kernel interface of the neural-network family (internal to worker/tensor).
// Tensors are contiguous; floating tensors share one dtype; index tensors
// (targets, ids) are int64. Every kernel gets non-empty tensors.
//
// Determinism: every sum is taken in double in an order fixed by the shapes
// alone (never by timing or thread count): the same bits on every run.
#pragma once

#include "worker/tensor/tensor.h"

namespace psync::ops {

class NnKernels {
 public:
  virtual ~NnKernels() = default;
  // x, y [rows, cols], rows, cols > 0.
  virtual void LogSoftmax(const Tensor& x, const Tensor& y) const = 0;
  // loss [] = mean_i (logsumexp(logits[i]) - logits[i, targets[i]]).
  virtual void CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& loss) const = 0;
  // dlogits = grad[0] * (softmax(logits) - onehot(targets)) / rows; grad on the same device.
  virtual void CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets,
                                    const Tensor& dlogits) const = 0;

  // ---- GPT layers (ops/nn.h has the math).
  // ids [...] (n ids in all), weight [V, C] -> y [n, C]: y[i] = weight[ids[i]].
  // An id outside [0, V): the CPU throws TensorError naming its position in
  // ids; CUDA writes a NaN row (a kernel cannot throw).
  virtual void Embedding(const Tensor& ids, const Tensor& weight, const Tensor& y) const = 0;
  // dweight [V, C] = for each row v, the sum of grad[i] (grad [n, C]) over
  // the positions i with ids[i] == v in increasing i, in double; 0 for rows
  // no id names. Out-of-range ids: as in Embedding (CUDA skips them).
  virtual void EmbeddingBackward(const Tensor& grad, const Tensor& ids, const Tensor& dweight) const = 0;
  // x, y [rows, C]; weight, bias [C]; mean, rstd [rows] in x's dtype.
  virtual void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd) const = 0;
  // All three gradients: dx [rows, C]; dweight, dbias [C] (column sums over
  // rows in chunks of kLayerNormRowChunk rows, the chunks then summed in
  // order, on every device).
  virtual void LayerNormBackward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                                 const Tensor& dbias) const = 0;
  // Elementwise, n elements.
  virtual void Gelu(const Tensor& x, const Tensor& y) const = 0;
  virtual void GeluBackward(const Tensor& grad, const Tensor& x, const Tensor& dx) const = 0;
  // x, y [rows, T], row r the query position i = r % T: y[r, j] =
  // softmax_j<=i(scale * x[r, j]), 0 for j > i.
  virtual void CausalSoftmax(const Tensor& x, double scale, const Tensor& y) const = 0;
  // dx[r, j] = scale * y[r, j] * (grad[r, j] - sum_k<=i grad[r, k] y[r, k]) for j <= i, 0 for j > i.
  virtual void CausalSoftmaxBackward(const Tensor& grad, const Tensor& y, double scale, const Tensor& dx) const = 0;
};

// Rows per chunk of LayerNorm's weight/bias gradient sums (see above).
inline constexpr int64_t kLayerNormRowChunk = 32;

const NnKernels& CpuNnKernels();
const NnKernels& CudaNnKernels();
const NnKernels& NnKernelsFor(Device device);

}  // namespace psync::ops
