// CUDA optimizer kernels (float32; see ops/optim.h for the rounding
// contract). Every operation is an explicit round-to-nearest intrinsic
// (__fmul_rn, __fmaf_rn, ...), so nvcc's contraction cannot fuse anything
// the CPU kernels round separately: CPU and CUDA updates agree bitwise.
//
// AdamW is multi-tensor: one launch updates up to kAdamWJobsPerLaunch
// parameters, their pointers, sizes and scalars passed by value as the
// kernel's parameter (a table of ~20 KiB: no host-to-device copy, nothing
// to keep alive); every block walks every parameter with a grid stride.
#include <algorithm>
#include <vector>

#include "worker/tensor/cuda/launch.cuh"
#include "worker/tensor/ops/optim_kernels.h"

namespace psync::ops {
namespace {

using cuda::BlocksFor;
using cuda::kThreads;
using cuda::Launch;

struct AdamWF {
  float decay, beta1, omb1, beta2, omb2, bc2_sqrt, eps, neg_step_size;
};

struct AdamWDeviceJob {
  float* p;
  const float* g;
  float* m;
  float* v;
  __nv_bfloat16* copy;  // null: no bf16 copy
  int64_t n;
  AdamWF s;
};

struct AdamWTable {
  int count;
  AdamWDeviceJob jobs[kAdamWJobsPerLaunch];
};
static_assert(sizeof(AdamWTable) < 32000, "a kernel parameter holds at most 32,764 bytes");

__global__ void AdamWKernel(const __grid_constant__ AdamWTable t) {
  for (int j = 0; j < t.count; ++j) {
    const AdamWDeviceJob& job = t.jobs[j];
    const AdamWF& s = job.s;
    float* __restrict__ p = job.p;
    const float* __restrict__ g = job.g;
    float* __restrict__ m = job.m;
    float* __restrict__ v = job.v;
    PSYNC_GRID_STRIDE(i, job.n) {
      const float gi = g[i];
      const float pi = __fmul_rn(p[i], s.decay);
      const float mi = __fmaf_rn(gi, s.omb1, __fmul_rn(m[i], s.beta1));
      const float vi = __fmaf_rn(__fmul_rn(s.omb2, gi), gi, __fmul_rn(v[i], s.beta2));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
      const float pn = __fadd_rn(pi, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
      p[i] = pn;
      m[i] = mi;
      v[i] = vi;
      if (job.copy != nullptr) job.copy[i] = __float2bfloat16_rn(pn);
    }
  }
}

__global__ void ToBf16Kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

// kMomentum: 0 none, 1 the first step (buf = d), 2 running (buf = buf*momentum + d).
template <bool kDecay, int kMomentum>
__global__ void SgdKernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf, int64_t n,
                          float wd, float momentum, float neg_lr) {
  PSYNC_GRID_STRIDE(i, n) {
    const float pi = p[i];
    float d = g[i];
    if constexpr (kDecay) d = __fmaf_rn(pi, wd, d);
    if constexpr (kMomentum == 2) d = __fadd_rn(__fmul_rn(buf[i], momentum), d);
    if constexpr (kMomentum != 0) buf[i] = d;
    p[i] = __fmaf_rn(d, neg_lr, pi);
  }
}

float* FW(const Tensor& t) { return static_cast<float*>(t.raw_data()); }

class CudaOptim final : public OptimKernels {
 public:
  void AdamW(const std::vector<AdamWJob>& jobs) const override {
    if (jobs.empty()) return;
    Launch l(jobs.front().p.device().index);
    AdamWTable t;
    int64_t largest = 0;
    auto launch = [&] {
      AdamWKernel<<<BlocksFor(largest), kThreads, 0, l.stream>>>(t);
      PSYNC_CUDA_CHECK(cudaGetLastError());
      t.count = 0;
      largest = 0;
    };
    t.count = 0;
    for (const AdamWJob& j : jobs) {
      if (j.p.dtype() != kFloat32) ThrowUnsupportedDType("AdamWUpdate on CUDA", j.p.dtype());
      const AdamWScalars& s = j.s;
      const AdamWF f{static_cast<float>(s.decay),           static_cast<float>(s.beta1),
                     static_cast<float>(s.one_minus_beta1), static_cast<float>(s.beta2),
                     static_cast<float>(s.one_minus_beta2), static_cast<float>(s.bc2_sqrt),
                     static_cast<float>(s.eps),             static_cast<float>(s.neg_step_size)};
      t.jobs[t.count++] = {FW(j.p),
                           static_cast<const float*>(j.g.raw_data()),
                           FW(j.m),
                           FW(j.v),
                           j.copy.defined() ? static_cast<__nv_bfloat16*>(j.copy.raw_data()) : nullptr,
                           j.p.numel(),
                           f};
      largest = std::max(largest, j.p.numel());
      if (t.count == kAdamWJobsPerLaunch) launch();
    }
    if (t.count > 0) launch();
  }

  void Sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdScalars& s,
           const Tensor& copy) const override {
    Launch l(p.device().index);
    const int64_t n = p.numel();
    float* b = buf.defined() ? FW(buf) : nullptr;
    const float wd = static_cast<float>(s.weight_decay), mom = static_cast<float>(s.momentum),
                neg_lr = static_cast<float>(s.neg_lr);
    const int kind = s.momentum == 0 ? 0 : (s.first ? 1 : 2);
    auto launch = [&](auto kernel) {
      kernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(FW(p), FW(g), b, n, wd, mom, neg_lr);
    };
    if (s.weight_decay != 0) {
      kind == 0 ? launch(SgdKernel<true, 0>) : kind == 1 ? launch(SgdKernel<true, 1>) : launch(SgdKernel<true, 2>);
    } else {
      kind == 0 ? launch(SgdKernel<false, 0>) : kind == 1 ? launch(SgdKernel<false, 1>) : launch(SgdKernel<false, 2>);
    }
    PSYNC_CUDA_CHECK(cudaGetLastError());
    if (copy.defined()) {
      ToBf16Kernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(FW(p), static_cast<__nv_bfloat16*>(copy.raw_data()), n);
      PSYNC_CUDA_CHECK(cudaGetLastError());
    }
  }
};

}  // namespace

const OptimKernels& CudaOptimKernels() {
  static const CudaOptim kernels;
  return kernels;
}

}  // namespace psync::ops
