// The CNN model (worker/nn/models/cnn.h) and its Conv2d layer: parameter
// names, shapes and order, seeded PyTorch-style init, forward/backward
// shapes on odd image sizes, the registry's validation, skip and input
// errors, and (with a GPU) CUDA against the CPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "psync/autograd/engine.h"
#include "psync/nn/conv2d.h"
#include "psync/nn/init.h"
#include "psync/nn/loss.h"
#include "worker/nn/models/cnn.h"
#include "psync/nn/models/registry.h"
#include "psync/tensor/device.h"
#include "psync/tensor/ops.h"

namespace psync::nn {
namespace {

using ::testing::HasSubstr;

Tensor Images(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(NumelOf(shape)));
  for (float& x : v) x = dist(gen);
  return Tensor::FromVector(v, shape);
}

Tensor Labels(int64_t n, int64_t classes) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 7) % classes;
  return Tensor::FromVector(v, {n});
}

TEST(Conv2dLayer, InitIsSeededUniformInPyTorchBounds) {
  Conv2d a(3, 8, 3, 1, 1, Device::CPU(), 42), b(3, 8, 3, 1, 1, Device::CPU(), 42), c(3, 8, 3, 1, 1, Device::CPU(), 43);
  EXPECT_EQ(a.weight().shape(), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(a.bias().shape(), (Shape{8}));
  EXPECT_EQ(a.weight().data().ToVector(), b.weight().data().ToVector());
  EXPECT_NE(a.weight().data().ToVector(), c.weight().data().ToVector());
  // torch: kaiming_uniform_(a=sqrt(5)) -> U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = 3*3*3; bias the same bound.
  const float bound = 1.0f / std::sqrt(27.0f);
  SplitMix64 rng(42);
  EXPECT_EQ(a.weight().data().ToVector(), UniformValues(rng, 8 * 27, -bound, bound));
  EXPECT_EQ(a.bias().data().ToVector(), UniformValues(rng, 8, -bound, bound));
  EXPECT_EQ(a.OutputSize(28), 28);
  EXPECT_EQ(Conv2d(1, 1, 3, 2, 0).OutputSize(28), 13);
}

TEST(Cnn, ParameterNamesShapesAndOrder) {
  CNN cnn({1, 28, 28}, 10, {16, 32}, Device::CPU(), 7);
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (const auto& [name, p] : cnn.named_parameters()) {
    names.push_back(name);
    shapes.push_back(p.shape());
    EXPECT_EQ(p.name(), name);
    EXPECT_TRUE(p.requires_grad());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc.weight",
                                             "fc.bias"}));
  EXPECT_EQ(shapes, (std::vector<Shape>{{16, 1, 3, 3}, {16}, {32, 16, 3, 3}, {32}, {10, 32 * 7 * 7}, {10}}));
  EXPECT_EQ(cnn.Describe(), "cnn 1x28x28 -> conv 16, 32 -> 10 classes (20490 parameters)");
  // Layer i is seeded with DeriveSeed(seed, i).
  EXPECT_EQ(cnn.named_parameters()[2].second.data().ToVector(),
            Conv2d(16, 32, 3, 1, 1, Device::CPU(), DeriveSeed(7, 1)).weight().data().ToVector());
  EXPECT_EQ(cnn.named_parameters()[4].second.data().ToVector(),
            Linear(32 * 7 * 7, 10, Device::CPU(), DeriveSeed(7, 2)).weight().data().ToVector());
}

TEST(Cnn, ForwardBackwardOnOddSizes) {
  // 3x30x29 -> pools floor: 15x14 -> 7x7.
  CNN cnn({3, 30, 29}, 5, {4, 6});
  EXPECT_EQ(cnn.named_parameters()[4].second.shape(), (Shape{5, 6 * 7 * 7}));
  const Tensor x = Images({4, 3, 30, 29}, 1);
  Variable logits = cnn.Forward(Variable(x));
  EXPECT_EQ(logits.shape(), (Shape{4, 5}));
  ASSERT_TRUE(autograd::Backward(nn::CrossEntropyLoss(logits, Labels(4, 5))).ok());
  for (const auto& [name, p] : cnn.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().shape(), p.shape()) << name;
    EXPECT_GT(ops::SumOfSquares(p.grad()).Item<double>(), 0.0) << name;
  }
  // The same images twice: the same bits.
  CNN again({3, 30, 29}, 5, {4, 6});
  EXPECT_EQ(again.Forward(Variable(x)).data().ToVector(), logits.data().ToVector());
}

TEST(Cnn, RegistryBuildsAndValidates) {
  ModelOptions o;
  o.input_shape = {1, 28, 28};
  o.num_classes = 10;
  o.seed = 3;
  auto m = Models().Create("cnn", o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT((*m)->Describe(), HasSubstr("conv 16, 32"));
  EXPECT_EQ((*m)->named_parameters()[0].second.data().ToVector(),
            Conv2d(1, 16, 3, 1, 1, Device::CPU(), DeriveSeed(3, 0)).weight().data().ToVector());
  o.flags.Set("cnn-channels", "8,12");
  ASSERT_TRUE(Models().Create("cnn", o).ok());
  EXPECT_EQ((*Models().Create("cnn", o))->named_parameters()[2].second.shape(), (Shape{12, 8, 3, 3}));

  auto error_of = [&](ModelOptions bad) { return std::string(Models().Create("cnn", bad).status().message()); };
  ModelOptions flat = o;
  flat.input_shape = {784};
  EXPECT_THAT(error_of(flat), HasSubstr("--model=cnn needs images [C, H, W] with H, W >= 4"));
  EXPECT_THAT(error_of(flat), HasSubstr("[784]"));
  ModelOptions tiny = o;
  tiny.input_shape = {1, 3, 28};
  EXPECT_THAT(error_of(tiny), HasSubstr("got examples of shape [1, 3, 28]"));
  ModelOptions regression = o;
  regression.num_classes = 0;
  EXPECT_THAT(error_of(regression), HasSubstr("needs classification data"));
  ModelOptions three = o;
  three.flags.Set("cnn-channels", "8,8,8");
  EXPECT_THAT(error_of(three), HasSubstr("--cnn-channels: want two channel counts (c1,c2), got 3 (8,8,8)"));
  ModelOptions zero = o;
  zero.flags.Set("cnn-channels", "8,0");
  EXPECT_THAT(error_of(zero), HasSubstr("--cnn-channels: channel count 0 must be positive"));
}

TEST(Cnn, SkippingAndWrongImagesAreClearErrors) {
  CNN cnn({1, 8, 8}, 3, {2, 2});
  EXPECT_TRUE(cnn.ValidateSkip({}).ok());
  absl::Status st = cnn.ValidateSkip({1});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("skipping layers is not supported for --model=cnn"));
  EXPECT_THROW(cnn.Forward(Variable(Images({2, 1, 8, 8}, 2)), {0}), TensorError);
  try {
    cnn.Forward(Variable(Images({2, 64}, 3)));
    ADD_FAILURE() << "expected TensorError";
  } catch (const TensorError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("cnn: images must be [batch, 1, 8, 8], got [2, 64]"));
  }
}

TEST(Cnn, CudaMatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << CheckDeviceAvailable(Device::CUDA(0)).message();
  CNN cpu({1, 28, 28}, 10, {16, 32}, Device::CPU(), 11), gpu({1, 28, 28}, 10, {16, 32}, Device::CUDA(0), 11);
  const Tensor x = Images({64, 1, 28, 28}, 4), y = Labels(64, 10);
  Variable lc = nn::CrossEntropyLoss(cpu.Forward(Variable(x)), y);
  Variable lg = nn::CrossEntropyLoss(gpu.Forward(Variable(x.To(Device::CUDA(0)))), y.To(Device::CUDA(0)));
  EXPECT_NEAR(lg.data().Item<float>(), lc.data().Item<float>(), 1e-5);
  ASSERT_TRUE(autograd::Backward(lc).ok());
  ASSERT_TRUE(autograd::Backward(lg).ok());
  for (size_t i = 0; i < cpu.parameters().size(); ++i) {
    const Tensor gc = cpu.parameters()[i].grad(), gg = gpu.parameters()[i].grad();
    float scale = 0.0f;
    for (float v : gc.ToVector()) scale = std::max(scale, std::fabs(v));
    EXPECT_LE(ops::MaxAbsDiff(gg, gc), 1e-5f * (1.0f + scale)) << cpu.named_parameters()[i].first;
  }
}

}  // namespace
}  // namespace psync::nn
