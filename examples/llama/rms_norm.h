// RMSNorm over the last dim, as Llama's LlamaRMSNorm:
//   y = x * rsqrt(mean(x^2, -1) + eps) * weight
// x [..., C], weight [C] (x's dtype) -> y [..., C]. Differentiable in x and
// weight (RmsNormBackward); float32 or float64, any device (host loops).
#pragma once

#include <psync/psync.h>

namespace llama {

psync::autograd::Variable RmsNorm(const psync::autograd::Variable& x, const psync::autograd::Variable& weight,
                                  double eps = 1e-5);

}  // namespace llama
