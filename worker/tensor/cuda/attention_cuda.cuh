// Shared by the attention family's CUDA sources (internal to worker/tensor):
// how a kernel addresses a [B, H, T, D] operand, and the bf16 tensor-core
// kernels (cuda/attention_mma.cu) that cuda/attention.cu dispatches to.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace psync::ops::attention_cuda {

// One [B, H, T, D] operand with unit last stride: row (b, h, t) starts at
// p + b * sb + h * sh + t * st.
template <typename S>
struct Heads {
  S* p;
  int64_t sb, sh, st;
  __device__ S* Row(int b, int h, int t) const { return p + b * sb + h * sh + t * st; }
};

using Bf16 = __nv_bfloat16;

// True for the head sizes the tensor-core kernels are built for (16, 32,
// 64: GPT-2's sizes all have D = 64); others take the SIMT kernels.
bool MmaSupports(int d);

// Forward: out (bf16) and lse (float32, natural log) per (b, h, row).
// scale: the softmax scale in float (as the CPU applies it).
void MmaForward(Heads<const Bf16> q, Heads<const Bf16> k, Heads<const Bf16> v, Heads<Bf16> out, float* lse, int B,
                int H, int T, int D, float scale, cudaStream_t stream);

// Deterministic backward: one kernel per key tile for dk, dv (loops over the
// query tiles that see it), one per query tile for dq (loops over the key
// tiles it sees); no atomics. delta [B, H, T] = rowsum(grad * out).
void MmaBackward(Heads<const Bf16> grad, Heads<const Bf16> q, Heads<const Bf16> k, Heads<const Bf16> v,
                 const float* lse, const float* delta, Heads<Bf16> dq, Heads<Bf16> dk, Heads<Bf16> dv, int B, int H,
                 int T, int D, float scale, cudaStream_t stream);

}  // namespace psync::ops::attention_cuda
