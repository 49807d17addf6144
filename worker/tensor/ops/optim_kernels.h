// Kernel interface of the optimizer family (internal to worker/tensor).
// Tensors are contiguous with one floating dtype, validated by ops/optim.cc;
// scalars are doubles that each kernel rounds once to that dtype.
#pragma once

#include <vector>

#include "psync/tensor/tensor.h"

namespace psync::ops {

// AdamW scalars, computed by ops/optim.cc exactly as torch computes them.
struct AdamWScalars {
  double decay;          // 1 - lr*weight_decay
  double beta1, one_minus_beta1;
  double beta2, one_minus_beta2;
  double bc2_sqrt;       // sqrt(1 - beta2^step)
  double eps;
  double neg_step_size;  // -(lr / (1 - beta1^step))
};

struct SgdScalars {
  double weight_decay;  // 0: d = g
  double momentum;      // 0: no buffer
  double neg_lr;
  bool first;
};

// One parameter of a (multi-tensor) AdamW step: p, m, v updated in place, g
// read; copy (undefined, or bfloat16 of p's shape) gets the rounded new p.
struct AdamWJob {
  Tensor p, g, m, v, copy;
  AdamWScalars s;
};

class OptimKernels {
 public:
  virtual ~OptimKernels() = default;
  // Every job, all on this device (CUDA: one kernel launch per
  // kAdamWJobsPerLaunch jobs; the CPU loops over them).
  virtual void AdamW(const std::vector<AdamWJob>& jobs) const = 0;
  // buf is undefined when s.momentum == 0; copy as in AdamWJob.
  virtual void Sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdScalars& s,
                   const Tensor& copy) const = 0;
};

// Jobs per CUDA launch of the multi-tensor AdamW (its table travels as the
// kernel's parameter): GPT-2 small's 148 parameters take one launch.
inline constexpr int kAdamWJobsPerLaunch = 256;

const OptimKernels& CpuOptimKernels();
const OptimKernels& CudaOptimKernels();
const OptimKernels& OptimKernelsFor(Device device);

}  // namespace psync::ops
