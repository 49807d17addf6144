#include "worker/tensor/ops/optim.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "worker/tensor/ops/check.h"
#include "worker/tensor/ops/optim_kernels.h"

namespace psync::ops {

const OptimKernels& OptimKernelsFor(Device device) {
  return device.is_cpu() ? CpuOptimKernels() : CudaOptimKernels();
}

namespace {
// g may be any layout with p's numel; the state tensors are updated in place.
void CheckState(const char* op, check::Args args, const Tensor& p, std::initializer_list<check::Arg> state) {
  check::Defined(op, args);
  check::ComputeFloat(op, args);
  check::SameNumel(op, args);
  check::Contiguous(op, args, {"p", &p});
  for (const check::Arg& a : state) {
    if (a.t->shape() != p.shape()) check::Fail(op, args, absl::StrCat(a.name, " must have p's shape"));
    check::Contiguous(op, args, a);
  }
}
}  // namespace

void AdamWUpdate(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& h) {
  const char* op = "AdamWUpdate";
  check::Args args = {{"p", &p}, {"g", &g}, {"m", &m}, {"v", &v}};
  CheckState(op, args, p, {{"m", &m}, {"v", &v}});
  if (h.step < 1) check::Fail(op, args, absl::StrCat("step must be >= 1, got ", h.step));
  if (p.numel() == 0) return;
  // torch/optim/adamw.py (_single_tensor_adamw), in Python doubles.
  const double step = static_cast<double>(h.step);
  const double bias_correction1 = 1 - std::pow(h.beta1, step);
  const double bias_correction2 = 1 - std::pow(h.beta2, step);
  AdamWScalars s;
  s.decay = 1 - h.lr * h.weight_decay;
  s.beta1 = h.beta1;
  s.one_minus_beta1 = 1 - h.beta1;
  s.beta2 = h.beta2;
  s.one_minus_beta2 = 1 - h.beta2;
  s.bc2_sqrt = std::sqrt(bias_correction2);
  s.eps = h.eps;
  s.neg_step_size = -(h.lr / bias_correction1);
  OptimKernelsFor(p.device()).AdamW(p, g.Contiguous(), m, v, s);
}

void SgdUpdate(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& h) {
  const char* op = "SgdUpdate";
  if (h.momentum != 0) {
    check::Args args = {{"p", &p}, {"g", &g}, {"buf", &buf}};
    CheckState(op, args, p, {{"buf", &buf}});
  } else {
    check::Args args = {{"p", &p}, {"g", &g}};
    CheckState(op, args, p, {});
  }
  if (p.numel() == 0) return;
  SgdScalars s{h.weight_decay, h.momentum, -h.lr, h.first};
  OptimKernelsFor(p.device()).Sgd(p, g.Contiguous(), h.momentum != 0 ? buf : Tensor(), s);
}

}  // namespace psync::ops
