#include "psync/tensor/ops/optim.h"

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

// p_copy: undefined, or bfloat16 of p's shape, contiguous, on p's device.
void CheckCopy(const char* op, check::Args args, const Tensor& p, const Tensor& p_copy) {
  if (!p_copy.defined()) return;
  if (p_copy.dtype() != kBFloat16 || p_copy.shape() != p.shape() || !p_copy.is_contiguous() ||
      p_copy.device() != p.device()) {
    check::Fail(op, args, absl::StrCat("p_copy must be a contiguous bfloat16 ", ShapeToString(p.shape()),
                                       " tensor on ", p.device().ToString(), ", got ", check::Describe(p_copy)));
  }
}

// torch/optim/adamw.py (_single_tensor_adamw), in Python doubles.
AdamWScalars Scalars(const AdamWStep& h) {
  AdamWScalars s;
  const double step = static_cast<double>(h.step);
  const double bias_correction1 = 1 - std::pow(h.beta1, step);
  const double bias_correction2 = 1 - std::pow(h.beta2, step);
  s.decay = 1 - h.lr * h.weight_decay;
  s.beta1 = h.beta1;
  s.one_minus_beta1 = 1 - h.beta1;
  s.beta2 = h.beta2;
  s.one_minus_beta2 = 1 - h.beta2;
  s.bc2_sqrt = std::sqrt(bias_correction2);
  s.eps = h.eps;
  s.neg_step_size = -(h.lr / bias_correction1);
  return s;
}

}  // namespace

void CheckAdamWParam(const AdamWParam& a) {
  const char* op = "AdamWUpdate";
  check::Args args = {{"p", &a.p}, {"g", &a.g}, {"m", &a.m}, {"v", &a.v}};
  CheckState(op, args, a.p, {{"m", &a.m}, {"v", &a.v}});
  CheckCopy(op, args, a.p, a.p_copy);
  if (a.step.step < 1) check::Fail(op, args, absl::StrCat("step must be >= 1, got ", a.step.step));
}

void AdamWUpdateMany(const std::vector<AdamWParam>& params) {
  for (const AdamWParam& a : params) CheckAdamWParam(a);
  // One batch of jobs per run of consecutive parameters on one device.
  std::vector<AdamWJob> jobs;
  Device device = Device::CPU();
  auto flush = [&] {
    if (!jobs.empty()) OptimKernelsFor(device).AdamW(jobs);
    jobs.clear();
  };
  for (const AdamWParam& a : params) {
    if (a.p.numel() == 0) continue;
    if (!jobs.empty() && a.p.device() != device) flush();
    device = a.p.device();
    jobs.push_back({a.p, a.g.Contiguous(), a.m, a.v, a.p_copy, Scalars(a.step)});
  }
  flush();
}

void AdamWUpdate(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& h,
                 const Tensor& p_copy) {
  AdamWUpdateMany({{p, g, m, v, p_copy, h}});
}

void SgdUpdate(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& h, const Tensor& p_copy) {
  const char* op = "SgdUpdate";
  if (h.momentum != 0) {
    check::Args args = {{"p", &p}, {"g", &g}, {"buf", &buf}};
    CheckState(op, args, p, {{"buf", &buf}});
    CheckCopy(op, args, p, p_copy);
  } else {
    check::Args args = {{"p", &p}, {"g", &g}};
    CheckState(op, args, p, {});
    CheckCopy(op, args, p, p_copy);
  }
  if (p.numel() == 0) return;
  SgdScalars s{h.weight_decay, h.momentum, -h.lr, h.first};
  OptimKernelsFor(p.device()).Sgd(p, g.Contiguous(), h.momentum != 0 ? buf : Tensor(), s, p_copy);
}

}  // namespace psync::ops
