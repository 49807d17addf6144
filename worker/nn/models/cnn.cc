#include "worker/nn/models/cnn.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/logging.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/nn_functions.h"
#include "psync/autograd/view_functions.h"
#include "psync/nn/init.h"

namespace psync::nn {
namespace {

constexpr int64_t kKernel = 3, kPadding = 1, kPool = 2;

}  // namespace

CNN::CNN(const Shape& input_shape, int64_t num_classes, const std::vector<int64_t>& channels, Device device,
         uint64_t seed)
    : input_shape_(input_shape), classes_(num_classes) {
  PSYNC_CHECK(input_shape.size() == 3 && input_shape[0] > 0 && input_shape[1] >= 4 && input_shape[2] >= 4)
      << "CNN input shape " << ShapeToString(input_shape) << " (want [C, H, W] with H, W >= 4)";
  PSYNC_CHECK(channels.size() == 2 && channels[0] > 0 && channels[1] > 0) << "CNN channels " << channels.size();
  PSYNC_CHECK(num_classes > 0) << "CNN classes " << num_classes;
  // 3x3 convolutions with padding 1 keep H and W; each pool halves them (floor).
  const int64_t h = input_shape[1] / kPool / kPool, w = input_shape[2] / kPool / kPool;
  conv1_ = RegisterModule("conv1", std::make_shared<Conv2d>(input_shape[0], channels[0], kKernel, 1, kPadding, device,
                                                            DeriveSeed(seed, 0)));
  conv2_ = RegisterModule("conv2", std::make_shared<Conv2d>(channels[0], channels[1], kKernel, 1, kPadding, device,
                                                            DeriveSeed(seed, 1)));
  fc_ = RegisterModule("fc", std::make_shared<Linear>(channels[1] * h * w, num_classes, device, DeriveSeed(seed, 2)));
}

absl::Status CNN::ValidateSkip(const std::set<int>& skip) const {
  if (skip.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("cnn: cannot skip layer ", *skip.begin(),
                                                 ": skipping layers is not supported for --model=cnn (every layer "
                                                 "changes the shape); drop --skip-layer"));
}

Variable CNN::Forward(const Variable& images, const std::set<int>& skip) {
  absl::Status st = ValidateSkip(skip);
  if (!st.ok()) throw TensorError(std::string(st.message()));
  const Shape& s = images.shape();
  if (s.size() != 4 || Shape(s.begin() + 1, s.end()) != input_shape_) {
    throw TensorError(absl::StrCat("cnn: images must be [batch, ", absl::StrJoin(input_shape_, ", "), "], got ",
                                   ShapeToString(s)));
  }
  Variable h = autograd::MaxPool2d(autograd::Relu((*conv1_)(images)), kPool);
  h = autograd::MaxPool2d(autograd::Relu((*conv2_)(h)), kPool);
  return (*fc_)(autograd::Reshape(h, {s[0], -1}));
}

std::string CNN::Describe() const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.data().numel();
  return absl::StrCat("cnn ", absl::StrJoin(input_shape_, "x"), " -> conv ", conv1_->out_channels(), ", ",
                      conv2_->out_channels(), " -> ", classes_, " classes (", n, " parameters)");
}

}  // namespace psync::nn
