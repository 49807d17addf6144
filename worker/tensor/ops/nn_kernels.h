// Kernel interface of the neural-network family (internal to worker/tensor).
// Tensors are contiguous; index tensors (targets, ids) are int64. Every
// kernel gets non-empty tensors. Floating tensors share one dtype, except
// where a comment says otherwise: the GPT layers and cross-entropy take
// bfloat16 activations next to float32 parameters, statistics and losses
// (ops/nn.h), the kernels computing in float32.
//
// Determinism: every sum is taken in double in an order fixed by the shapes
// alone (never by timing or thread count): the same bits on every run.
#pragma once

#include "psync/tensor/tensor.h"

namespace psync::ops {

// Shapes of one 2-d convolution (ops/nn.h Conv2d): x [n, cin, h, w],
// weight [cout, cin, kh, kw], y [n, cout, ho, wo].
struct Conv2dGeometry {
  int64_t n = 0, cin = 0, h = 0, w = 0;
  int64_t cout = 0, kh = 0, kw = 0;
  int64_t stride = 1, padding = 0;
  int64_t ho = 0, wo = 0;
  int64_t K() const { return cin * kh * kw; }  // rows of the column matrix
  int64_t L() const { return ho * wo; }         // its columns (output positions)
};

class NnKernels {
 public:
  virtual ~NnKernels() = default;
  // x, y [rows, cols], rows, cols > 0.
  virtual void LogSoftmax(const Tensor& x, const Tensor& y) const = 0;
  // loss [] = mean_i (logsumexp(logits[i]) - logits[i, targets[i]]); loss
  // has the logits' math dtype.
  virtual void CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& loss) const = 0;
  // dlogits = grad[0] * (softmax(logits) - onehot(targets)) / rows; grad
  // (the loss's dtype) on the same device.
  virtual void CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets,
                                    const Tensor& dlogits) const = 0;
  // logits [rows, cols] (unit column stride, row stride logits.stride(0);
  // float32, float64, bfloat16): loss [] (float32; float64 for float64) =
  // CrossEntropy, and logits := grad_scale (softmax - onehot) / rows in place.
  virtual void FusedClassifier(const Tensor& logits, const Tensor& targets, float grad_scale,
                               const Tensor& loss) const = 0;
  // dlogits (as above) *= grad[0] / grad_scale unless grad[0] == grad_scale.
  virtual void RescaleClassifierGrad(const Tensor& dlogits, const Tensor& grad, float grad_scale) const = 0;

  // ---- GPT layers (ops/nn.h has the math).
  // ids [...] (n ids in all), weight [V, C] -> y [n, C]: y[i] = weight[ids[i]].
  // An id outside [0, V): the CPU throws TensorError naming its position in
  // ids; CUDA writes a NaN row (a kernel cannot throw).
  virtual void Embedding(const Tensor& ids, const Tensor& weight, const Tensor& y) const = 0;
  // dweight [V, C] = for each row v, the sum of grad[i] (grad [n, C]) over
  // the positions i with ids[i] == v in increasing i, in double; 0 for rows
  // no id names. Out-of-range ids: as in Embedding (CUDA skips them).
  virtual void EmbeddingBackward(const Tensor& grad, const Tensor& ids, const Tensor& dweight) const = 0;
  // x, y [rows, C] (y's dtype may differ); weight, bias [C]; mean, rstd
  // [rows]: x's math dtype.
  virtual void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd) const = 0;
  // h = x + a (h of x's dtype, a of x's or bfloat16), then LayerNorm(h)
  // into y, mean, rstd as above; each row's h is computed and normalized in
  // one pass.
  virtual void ResidualLayerNorm(const Tensor& x, const Tensor& a, const Tensor& weight, const Tensor& bias,
                                 double eps, const Tensor& h, const Tensor& y, const Tensor& mean,
                                 const Tensor& rstd) const = 0;
  // All three gradients: dx [rows, C] of x's dtype (grad may be bfloat16 or
  // float32 beside it), plus residual_grad when defined; dweight, dbias [C]
  // (column sums over rows in chunks of kLayerNormRowChunk rows, the chunks
  // then summed in order, on every device).
  virtual void LayerNormBackward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& residual_grad, const Tensor& dx,
                                 const Tensor& dweight, const Tensor& dbias) const = 0;
  // Elementwise, n elements. GeluBackward: dx of x's dtype; grad of x's, or
  // float32/bfloat16 beside bfloat16/float32.
  virtual void Gelu(const Tensor& x, const Tensor& y) const = 0;
  virtual void GeluBackward(const Tensor& grad, const Tensor& x, const Tensor& dx) const = 0;
  // x, y [rows, T], row r the query position i = r % T: y[r, j] =
  // softmax_j<=i(scale * x[r, j]), 0 for j > i.
  virtual void CausalSoftmax(const Tensor& x, double scale, const Tensor& y) const = 0;
  // dx[r, j] = scale * y[r, j] * (grad[r, j] - sum_k<=i grad[r, k] y[r, k]) for j <= i, 0 for j > i.
  virtual void CausalSoftmaxBackward(const Tensor& grad, const Tensor& y, double scale, const Tensor& dx) const = 0;

  // ---- CNN layers. ops/nn_conv.cc builds Conv2d from these and BlasKernels'
  // Gemm (im2col + matrix products); the shapes are in Conv2dGeometry.
  // Each kernel gets a chunk of n images (n = x.size(0), at most g.n).
  // x [n, C, H, W] -> col [n, K, L], K = C*kh*kw rows ordered
  // (c, i, j) like the weight's [Cout, C, kh, kw], L = Ho*Wo columns:
  // col[k = (c, i, j), l = (oh, ow)] = x[c, oh*stride - padding + i,
  // ow*stride - padding + j], 0 where that is outside the image (padding).
  virtual void Im2Col(const Tensor& x, const Conv2dGeometry& g, const Tensor& col) const = 0;
  // The adjoint of Im2Col: dx [n, C, H, W], each element the sum of the col
  // entries Im2Col copied from it, added in increasing (i, j) order starting
  // from the first (an exact 0 where none is): the same bits on every device.
  virtual void Col2Im(const Tensor& col, const Conv2dGeometry& g, const Tensor& dx) const = 0;
  // y [n, C, L] += bias[c].
  virtual void AddChannelBias(const Tensor& y, const Tensor& bias) const = 0;
  // dbias [C] = sum over images n (in order) of the double sum over l of
  // grad [n, C, L].
  virtual void ChannelSums(const Tensor& grad, const Tensor& dbias) const = 0;
  // acc [m] (float64) += parts [n, m] summed over n in order, in double.
  virtual void AccumulateParts(const Tensor& parts, const Tensor& acc) const = 0;
  // x [planes, H, W] -> y, indices [planes, Ho, Wo], Ho = H / k, Wo = W / k
  // (windows k x k at stride k; rows/columns past Ho*k, Wo*k are dropped):
  // the max of each window and its position h*W + w in the plane (the first
  // max in row-major window order; a NaN wins and propagates, as in torch).
  virtual void MaxPool2d(const Tensor& x, int64_t k, const Tensor& y, const Tensor& indices) const = 0;
  // dx [planes, H, W] = grad [planes, Ho, Wo] at each window's index, 0
  // elsewhere. Windows never overlap, so every dx element gets at most one
  // value: nothing is summed. An index outside its window: the CPU throws
  // TensorError naming it; CUDA drops that gradient (a kernel cannot throw).
  virtual void MaxPool2dBackward(const Tensor& grad, const Tensor& indices, int64_t k, const Tensor& dx) const = 0;
};

// Rows per chunk of LayerNorm's weight/bias gradient sums (see above).
inline constexpr int64_t kLayerNormRowChunk = 32;

const NnKernels& CpuNnKernels();
const NnKernels& CudaNnKernels();
const NnKernels& NnKernelsFor(Device device);

}  // namespace psync::ops
