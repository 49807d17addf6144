// Kernel interface of the optimizer family (internal to worker/tensor).
// Tensors are contiguous with one floating dtype, validated by ops/optim.cc;
// scalars are doubles that each kernel rounds once to that dtype.
#pragma once

#include "worker/tensor/tensor.h"

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

class OptimKernels {
 public:
  virtual ~OptimKernels() = default;
  virtual void AdamW(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                     const AdamWScalars& s) const = 0;
  // buf is undefined when s.momentum == 0.
  virtual void Sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdScalars& s) const = 0;
};

const OptimKernels& CpuOptimKernels();
const OptimKernels& CudaOptimKernels();
const OptimKernels& OptimKernelsFor(Device device);

}  // namespace psync::ops
