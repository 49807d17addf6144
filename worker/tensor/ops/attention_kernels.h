// Kernel interface of the attention family (internal to worker/tensor; the
// math is in ops/attention.h).
//
// q, k, v, grad, out: [B, H, T, D] with a unit last stride, other strides
// any (the ops make out, dq, dk, dv views of contiguous [B, T, H, D] tensors);
// lse [B, H, T] contiguous, float32 (float64 for float64 inputs). Every
// kernel gets non-empty tensors of one dtype (float32, float64 on the CPU,
// bfloat16).
//
// Tiling, the same on every device: queries in tiles of kAttentionTile rows,
// keys and values streamed in tiles of kAttentionTile rows; a key tile that
// lies wholly after a query tile's last row is never touched.
#pragma once

#include <cstdint>

#include "psync/tensor/tensor.h"

namespace psync::ops {

inline constexpr int64_t kAttentionTile = 64;

class AttentionKernels {
 public:
  virtual ~AttentionKernels() = default;
  // out = softmax(scale q k^T, causal) v and lse, per (batch, head).
  virtual void Forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                       const Tensor& lse) const = 0;
  // dq, dk, dv from grad (d out) and the forward's tensors. deterministic:
  // no order that depends on timing (every device honours true; false lets
  // CUDA add dq with float atomics).
  virtual void Backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, double scale, bool deterministic, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv) const = 0;
};

const AttentionKernels& CpuAttentionKernels();
const AttentionKernels& CudaAttentionKernels();
const AttentionKernels& AttentionKernelsFor(Device device);

}  // namespace psync::ops
