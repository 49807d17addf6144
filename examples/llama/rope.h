// Rotary position embedding, HF Llama's half-split ("rotate_half") form:
// x [B, T, H, D] (D even; the position of x[b, t] is t) -> y, same shape:
//   half = D/2; for i < half: a = t * theta^(-2i/D), c = cos a, s = sin a
//   y[.., i]        = x[.., i] * c - x[.., i + half] * s
//   y[.., i + half] = x[.., i + half] * c + x[.., i] * s
// which is x * cat(cos, cos) + rotate_half(x) * cat(sin, sin). A rotation per
// pair, so the backward is the rotation by -a (RopeBackward saves nothing).
// float32 or float64, any device (host loops).
#pragma once

#include <psync/psync.h>

namespace llama {

psync::autograd::Variable Rope(const psync::autograd::Variable& x, double theta = 10000.0);

}  // namespace llama
