// Conv2d, like torch.nn.Conv2d(in, out, kernel, stride, padding) (square
// kernel, zero padding, with a bias).
#pragma once

#include <cstdint>

#include "psync/nn/module.h"
#include "psync/tensor/device.h"

namespace psync::nn {

// weight [out, in, k, k], bias [out], both initialised from U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)), fan_in = in * k * k: torch's default (kaiming_uniform_
// with a = sqrt(5) gives exactly that bound for the weight; the bias uses
// it too), drawn with SplitMix64(seed): weight values first (row-major),
// then bias.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         Device device = Device::CPU(), uint64_t seed = 0);
  // x [N, in, H, W] -> [N, out, Ho, Wo].
  Variable Forward(const Variable& x) override;

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  int64_t kernel() const { return kernel_; }
  int64_t stride() const { return stride_; }
  int64_t padding() const { return padding_; }
  const Parameter& weight() const { return weight_; }
  const Parameter& bias() const { return bias_; }
  // The output's height or width for an input's.
  int64_t OutputSize(int64_t input) const { return (input + 2 * padding_ - kernel_) / stride_ + 1; }

 private:
  int64_t in_, out_, kernel_, stride_, padding_;
  Parameter weight_, bias_;
};

}  // namespace psync::nn
