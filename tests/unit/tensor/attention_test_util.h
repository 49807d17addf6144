// Helpers of the attention tests (CPU and CUDA): random q, k, v (contiguous
// or as the head views of one qkv projection), and the materialized path
// (BatchedMatmul, CausalSoftmax, BatchedMatmul) the fused op is checked against.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/unit/tensor/test_util.h"
#include "psync/tensor/ops.h"

namespace psync::testing {

struct Qkv {
  Tensor q, k, v;
  Tensor projection;  // [B, T, 3 H D] when q, k, v are its head views, else undefined
};

// The head views [B, H, T, D] of a qkv projection [B, T, 3 H D].
inline Qkv HeadsOf(const Tensor& qkv, int64_t H) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / H;
  auto head = [&](int64_t i) { return qkv.Narrow(2, i * C, C).Reshape({B, T, H, D}).Permute({0, 2, 1, 3}); };
  return {head(0), head(1), head(2), qkv};
}

// q, k, v [B, H, T, D] float32 with values in [lo, hi). as_projection: the
// three are the head views of one [B, T, 3 H D] tensor (what the GPT passes:
// strides (3 T H D, D, 3 H D, 1)), else contiguous.
inline Qkv RandomQkv(int64_t B, int64_t H, int64_t T, int64_t D, uint32_t seed, bool as_projection,
                     Device device = Device::CPU(), float lo = -1.0f, float hi = 1.0f) {
  if (as_projection) return HeadsOf(RandomTensor({B, T, 3 * H * D}, seed, device, lo, hi), H);
  return {RandomTensor({B, H, T, D}, seed, device, lo, hi), RandomTensor({B, H, T, D}, seed + 1, device, lo, hi),
          RandomTensor({B, H, T, D}, seed + 2, device, lo, hi), Tensor()};
}

// The same tensors (and layout) in another dtype or on another device.
inline Qkv To(const Qkv& x, DType dt) {
  if (x.projection.defined()) return HeadsOf(x.projection.To(dt), x.q.size(1));
  return {x.q.To(dt), x.k.To(dt), x.v.To(dt), Tensor()};
}
inline Qkv To(const Qkv& x, Device d) {
  if (x.projection.defined()) return HeadsOf(x.projection.To(d), x.q.size(1));
  return {x.q.To(d), x.k.To(d), x.v.To(d), Tensor()};
}

// softmax(scale q k^T, causal) v through the materialized [B, H, T, T] path.
inline Tensor MaterializedAttention(const Qkv& x, double scale, Tensor* probs = nullptr) {
  const Tensor p = ops::CausalSoftmax(ops::BatchedMatmul(x.q, x.k.Transpose(-2, -1)), scale);
  if (probs) *probs = p;
  return ops::BatchedMatmul(p, x.v);
}

// dq, dk, dv of the materialized path for grad (d out).
inline ops::AttentionGrads MaterializedAttentionBackward(const Qkv& x, const Tensor& grad, double scale) {
  Tensor p;
  MaterializedAttention(x, scale, &p);
  const Tensor ds = ops::CausalSoftmaxBackward(ops::BatchedMatmul(grad, x.v.Transpose(-2, -1)), p, scale);
  return {ops::BatchedMatmul(ds, x.k), ops::BatchedMatmul(ds.Transpose(-2, -1), x.q),
          ops::BatchedMatmul(p.Transpose(-2, -1), grad)};
}

// max |a - b| / max |b| (a, b of any floating dtype and device).
inline double RelDiff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.To(Device::CPU()).To(kFloat64).Contiguous().ToVector<double>();
  const std::vector<double> y = b.To(Device::CPU()).To(kFloat64).Contiguous().ToVector<double>();
  EXPECT_EQ(x.size(), y.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    diff = std::max(diff, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  if (std::isnan(diff)) return diff;
  return scale > 0 ? diff / scale : diff;
}

// Same values, bit for bit (any dtype, device and layout).
inline bool SameBits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.To(Device::CPU()).Contiguous(), y = b.To(Device::CPU()).Contiguous();
  return x.nbytes() == y.nbytes() && std::equal(static_cast<const char*>(x.raw_data()),
                                                static_cast<const char*>(x.raw_data()) + x.nbytes(),
                                                static_cast<const char*>(y.raw_data()));
}

}  // namespace psync::testing
