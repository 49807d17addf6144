// What the custom functions of this example share: psync's public tensor ops
// have no exp, rsqrt or cos, so RMSNorm, RoPE and SiLU run their own loops over
// host memory, in the input's dtype (float32 for training, float64 for
// GradCheck). A CUDA tensor is copied to the host and the result back: right,
// not fast (the loops are the part to port to a kernel).
#pragma once

#include <string>
#include <utility>

#include <psync/psync.h>

namespace llama {

using psync::Device;
using psync::Shape;
using psync::Tensor;
using psync::autograd::TensorList;
using psync::autograd::Variable;

// t on the host, contiguous (t itself when it already is).
inline Tensor HostContiguous(const Tensor& t) { return t.To(Device::CPU()).Contiguous(); }

// fn(float{}) or fn(double{}) by dtype, so one templated loop serves both;
// any other dtype throws TensorError naming the op (no abort).
template <typename Fn>
void DispatchFloat(const char* op, const Tensor& t, Fn&& fn) {
  if (t.dtype() == psync::kFloat32) {
    fn(float{});
  } else if (t.dtype() == psync::kFloat64) {
    fn(double{});
  } else {
    throw psync::TensorError(std::string(op) + ": float32 or float64 only, got " + t.DebugString());
  }
}

}  // namespace llama
