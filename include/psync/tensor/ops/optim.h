// Fused optimizer updates: one pass over a parameter's tensors, in place.
//
// Rounding follows PyTorch 1.13's single-tensor (foreach=False) CPU kernels
// op by op, so float32 results equal torch.optim bit for bit (checked by
// tests/unit/optim against torch on this machine). Where torch's `add` with
// an alpha and `addcmul` compile to a fused multiply-add (its AVX2 kernels
// do, vector and tail alike), the kernels here use an explicit fma; nothing
// else is fused. CPU and CUDA run the same rounding, so they agree bitwise.
// Scalars are computed in double, as Python does, and rounded to the
// tensors' dtype once, as torch's Scalar::to<float>() does.
#pragma once

#include <cstdint>
#include <vector>

#include "psync/tensor/tensor.h"

namespace psync::ops {

// One torch.optim.AdamW step of one parameter (amsgrad off, no maximize).
struct AdamWStep {
  double lr = 0;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // 0: no decay (torch multiplies by 1.0: the same bits)
  int64_t step = 1;         // this parameter's step count, already advanced (>= 1)
};
// p, m (exp_avg), v (exp_avg_sq): contiguous, p's shape; g: p's numel, any
// layout. One device; float32, or float64 on the CPU. Per element:
//   p = p * (1 - lr*wd)
//   m = fma(g, 1-beta1, m*beta1)
//   v = fma((1-beta2)*g, g, v*beta2)
//   p = p + (-step_size*m) / (sqrt(v)/sqrt(bc2) + eps)
// with bc1 = 1 - beta1^step, bc2 = 1 - beta2^step, step_size = lr/bc1.
// p_copy: undefined, or a contiguous bfloat16 tensor of p's shape that gets
// the new p rounded to bfloat16 in the same pass (the weight copy a bf16
// step's matmuls read: nn/precision.h), so no separate cast pass runs.
void AdamWUpdate(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& step,
                 const Tensor& p_copy = Tensor());
// One parameter's tensors and step, for AdamWUpdateMany.
struct AdamWParam {
  Tensor p, g, m, v, p_copy;
  AdamWStep step;
};
// Checks one parameter as AdamWUpdate would, without updating anything
// (throws TensorError naming the operand).
void CheckAdamWParam(const AdamWParam& param);
// AdamWUpdate of every parameter, each with the same bits as its own
// AdamWUpdate: on CUDA one kernel launch for all of them (per device, per
// kAdamWJobsPerLaunch parameters), on the CPU a loop. Checks everything
// before updating anything.
void AdamWUpdateMany(const std::vector<AdamWParam>& params);

// One torch.optim.SGD step of one parameter (dampening 0, no Nesterov).
struct SgdStep {
  double lr = 0;
  double momentum = 0;      // 0: no buffer
  double weight_decay = 0;  // L2, added to the gradient
  bool first = false;       // the parameter's first step: buf = d (torch clones d_p)
};
// buf: p's shape, contiguous, when momentum != 0; else undefined. Per element:
//   d = wd != 0 ? fma(p, wd, g) : g
//   momentum != 0: buf = first ? d : buf*momentum + d;  d = buf
//   p = fma(d, -lr, p)
void SgdUpdate(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& step,
               const Tensor& p_copy = Tensor());

}  // namespace psync::ops
