// Fused causal self-attention (flash-style): softmax(scale q k^T, keys j <= i)
// times v, computed in tiles of queries against streamed tiles of keys and
// values with an online softmax, so the [T, T] probabilities are never
// stored: memory O(T) per head instead of O(T^2). The backward recomputes the
// probabilities tile by tile from the saved log-sum-exp. Tiles above the
// diagonal (all keys in the future) are skipped, half of the work of the
// materialized path (CausalSoftmax between two BatchedMatmuls).
//
// dtypes: float32 on every device, float64 on the CPU (gradient checks),
// bfloat16 storage with float32 math (CPU: tiles converted to float, OpenBLAS
// sgemm; CUDA: bf16 tensor-core mma with float32 accumulation).
//
// Layout: q, k, v are [B, H, T, D] with any strides whose last is 1 (a last
// dim with another stride is copied first), e.g. the head views of the qkv
// projection [B, T, 3C] (Reshape to [B, T, 3, H, D] and Permute) cost no copy.
// out, dq, dk, dv are [B, H, T, D] views of contiguous [B, T, H, D] tensors,
// so Permute({0, 2, 1, 3}).Reshape({B, T, H * D}) joins the heads for free.
#pragma once

#include "psync/tensor/tensor.h"

namespace psync::ops {

struct AttentionResult {
  Tensor out;  // [B, H, T, D] in q's dtype (a view of a contiguous [B, T, H, D])
  Tensor lse;  // [B, H, T]: log(sum_j<=i exp(scale q_i . k_j)); float32 (float64 for float64 inputs)
};
AttentionResult CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, double scale);

struct AttentionGrads {
  Tensor dq, dk, dv;  // [B, H, T, D] in q's dtype, each a view of a contiguous [B, T, H, D]
};
// Gradients of CausalAttention from grad (d out, [B, H, T, D], any strides)
// and the forward's q, k, v, out and lse. `deterministic` (the default): the
// same bits on every run, on every device. false allows a faster kernel that
// adds in a timing-dependent order (CUDA float atomics); the CPU is always
// deterministic and ignores it.
AttentionGrads CausalAttentionBackward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const Tensor& lse, double scale, bool deterministic = true);

}  // namespace psync::ops
