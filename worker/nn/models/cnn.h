// CNN: the small convolutional classifier of --model=cnn (Fashion-MNIST
// sized):
//
//   conv1: Conv2d(C -> c1, 3x3, padding 1) + ReLU + 2x2 max-pool
//   conv2: Conv2d(c1 -> c2, 3x3, padding 1) + ReLU + 2x2 max-pool
//   fc:    flatten, Linear(c2 * (H/4) * (W/4) -> classes)
//
// (H/4 is floor(floor(H/2)/2), as torch's pooling floors.) Parameters, in
// this order: conv1.weight [c1, C, 3, 3], conv1.bias, conv2.weight
// [c2, c1, 3, 3], conv2.bias, fc.weight [classes, c2*(H/4)*(W/4)], fc.bias:
// the names and layout of the same torch.nn module, so --init and
// checkpoints load in PyTorch and back. Each layer is initialised like
// torch's default, seeded with DeriveSeed(seed, i) for layer i = 0, 1, 2.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "psync/nn/conv2d.h"
#include "psync/nn/layers.h"
#include "psync/nn/models/model.h"

namespace psync::nn {

class CNN : public Model {
 public:
  // input_shape: one image [C, H, W] with H, W >= 4; channels {c1, c2}.
  // Throws InternalError (PSYNC_CHECK) on shapes the registry rejects.
  CNN(const Shape& input_shape, int64_t num_classes, const std::vector<int64_t>& channels = {16, 32},
      Device device = Device::CPU(), uint64_t seed = 0);

  using Model::Forward;
  // images [b, C, H, W] -> logits [b, classes]. `skip` must be empty (the
  // CNN has no layer that can be bypassed; ValidateSkip says so).
  Variable Forward(const Variable& images, const std::set<int>& skip) override;
  absl::Status ValidateSkip(const std::set<int>& skip) const override;
  // "cnn 1x28x28 -> conv 16, 32 -> 10 classes (20490 parameters)"
  std::string Describe() const override;

  const Shape& input_shape() const { return input_shape_; }
  int64_t num_classes() const { return classes_; }

 private:
  Shape input_shape_;
  int64_t classes_;
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<Linear> fc_;
};

}  // namespace psync::nn
