// SiLU (swish), elementwise: y = x * sigmoid(x) = x / (1 + exp(-x)), any shape.
// Backward: dx = g * s * (1 + x * (1 - s)), s = sigmoid(x) (SiluBackward saves
// x). float32 or float64, any device (host loops).
#pragma once

#include <psync/psync.h>

namespace llama {

psync::autograd::Variable Silu(const psync::autograd::Variable& x);

}  // namespace llama
