#include "psync/nn/conv2d.h"

#include <cmath>
#include <vector>

#include "psync/common/logging.h"
#include "psync/autograd/nn_functions.h"
#include "psync/nn/init.h"

namespace psync::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
               Device device, uint64_t seed)
    : in_(in_channels), out_(out_channels), kernel_(kernel), stride_(stride), padding_(padding) {
  PSYNC_CHECK(in_channels > 0 && out_channels > 0 && kernel > 0 && stride > 0 && padding >= 0)
      << "Conv2d(" << in_channels << ", " << out_channels << ", kernel " << kernel << ", stride " << stride
      << ", padding " << padding << ")";
  const int64_t fan_in = in_channels * kernel * kernel;
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  SplitMix64 rng(seed);
  std::vector<float> w = UniformValues(rng, out_channels * fan_in, -bound, bound);
  std::vector<float> b = UniformValues(rng, out_channels, -bound, bound);
  weight_ = RegisterParameter("weight", Tensor::FromVector(w, {out_channels, in_channels, kernel, kernel}, device));
  bias_ = RegisterParameter("bias", Tensor::FromVector(b, {out_channels}, device));
}

Variable Conv2d::Forward(const Variable& x) { return autograd::Conv2d(x, weight_, bias_, stride_, padding_); }

}  // namespace psync::nn
