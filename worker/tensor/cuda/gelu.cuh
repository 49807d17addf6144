// GELU (tanh form) on the device, as x / (1 + exp(-2u)), u = sqrt(2/pi) (x +
// 0.044715 x^3), and its derivative (cpu/nn.cc has the CPU's; internal to
// worker/tensor/cuda): shared by the nn kernels and the matmul epilogues.
#pragma once

namespace psync::cuda {

constexpr float kGeluK = 0.79788456080286535588f, kGeluC = 0.044715f;

__device__ __forceinline__ float GeluValue(float v) {
  const float u = kGeluK * (v + kGeluC * v * v * v);
  return v / (1.0f + expf(-2.0f * u));
}

// gelu'(v) = s + 2 v s (1 - s) u'(v), s = sigmoid(2u).
__device__ __forceinline__ float GeluGrad(float v) {
  const float u = kGeluK * (v + kGeluC * v * v * v);
  const float s = 1.0f / (1.0f + expf(-2.0f * u));
  const float du = kGeluK * (1.0f + 3.0f * kGeluC * v * v);
  return s + 2.0f * v * s * (1.0f - s) * du;
}

}  // namespace psync::cuda
