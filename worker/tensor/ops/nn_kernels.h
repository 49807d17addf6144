// Kernel interface of the neural-network family (internal to worker/tensor).
// Tensors are contiguous; floating tensors share one dtype; index tensors
// (targets) are int64.
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
};

const NnKernels& CpuNnKernels();
const NnKernels& CudaNnKernels();
const NnKernels& NnKernelsFor(Device device);

}  // namespace psync::ops
