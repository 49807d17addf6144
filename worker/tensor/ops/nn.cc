#include "worker/tensor/ops/nn.h"

#include "worker/tensor/ops/check.h"
#include "worker/tensor/ops/nn_kernels.h"

namespace psync::ops {

const NnKernels& NnKernelsFor(Device device) { return device.is_cpu() ? CpuNnKernels() : CudaNnKernels(); }

namespace {

// logits [N,C] float and targets [N] int64 on one device, N > 0 and C > 0.
Device CheckCrossEntropyArgs(const char* op, check::Args args, const Tensor& logits, const Tensor& targets) {
  const Device d = check::Defined(op, args);
  check::ComputeFloat(op, {{"logits", &logits}});
  check::Dim(op, args, {"logits", &logits}, 2);
  check::Dim(op, args, {"targets", &targets}, 1);
  check::DTypeIs(op, args, {"targets", &targets}, kInt64);
  if (targets.size(0) != logits.size(0)) check::Fail(op, args, "targets must have one entry per row of logits");
  if (logits.size(0) == 0 || logits.size(1) == 0) check::Fail(op, args, "logits must not be empty");
  return d;
}

}  // namespace

Tensor LogSoftmax(const Tensor& logits) {
  const char* op = "LogSoftmax";
  check::Args args = {{"logits", &logits}};
  const Device d = check::Defined(op, args);
  const DType dt = check::ComputeFloat(op, args);
  check::Dim(op, args, {"logits", &logits}, 2);
  Tensor y = Tensor::Empty(logits.shape(), dt, d);
  // [N, 0] or [0, C]: nothing to normalise, and the kernels read x[0] of every row.
  if (y.numel() == 0) return y;
  NnKernelsFor(d).LogSoftmax(logits.Contiguous(), y);
  return y;
}

Tensor CrossEntropy(const Tensor& logits, const Tensor& targets) {
  const char* op = "CrossEntropy";
  const Device d = CheckCrossEntropyArgs(op, {{"logits", &logits}, {"targets", &targets}}, logits, targets);
  Tensor loss = Tensor::Empty({}, logits.dtype(), d);
  NnKernelsFor(d).CrossEntropy(logits.Contiguous(), targets.Contiguous(), loss);
  return loss;
}

Tensor CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets) {
  const char* op = "CrossEntropyBackward";
  check::Args args = {{"grad", &grad}, {"logits", &logits}, {"targets", &targets}};
  check::Defined(op, args, /*same_device=*/false);
  const Device d = CheckCrossEntropyArgs(op, {{"logits", &logits}, {"targets", &targets}}, logits, targets);
  if (grad.numel() != 1) check::Fail(op, args, "grad must hold exactly one element");
  if (grad.dtype() != logits.dtype()) check::Fail(op, args, "grad and logits dtypes differ");
  Tensor dlogits = Tensor::Empty(logits.shape(), logits.dtype(), d);
  // grad normally lives on d already; To() is then free and nothing waits for the host.
  NnKernelsFor(d).CrossEntropyBackward(grad.To(d), logits.Contiguous(), targets.Contiguous(), dlogits);
  return dlogits;
}

}  // namespace psync::ops
