#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "psync/autograd/engine.h"
#include "psync/nn/init.h"
#include "worker/nn/models/mlp.h"
#include "psync/nn/loss.h"
#include "psync/nn/state_dict.h"

namespace psync::nn {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Names(const Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(name);
  return out;
}

TEST(Module, MlpParameterNamesInRegistrationOrder) {
  MLP mlp({3, 4, 4, 2}, Device::CPU(), 1);
  const std::vector<std::string> want = {"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                         "layers.1.bias",   "layers.2.weight", "layers.2.bias"};
  EXPECT_EQ(Names(mlp), want);
  auto named = mlp.named_parameters();
  for (const auto& [name, p] : named) {
    EXPECT_EQ(p.name(), name);  // the Variable carries its dotted name for error messages
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_EQ(named[0].second.shape(), (Shape{4, 3}));
  EXPECT_EQ(named[1].second.shape(), (Shape{4}));
  EXPECT_EQ(named[4].second.shape(), (Shape{2, 4}));
  ASSERT_EQ(mlp.parameters().size(), 6u);
  EXPECT_TRUE(mlp.parameters()[2].is_same(mlp.layer(1).weight()));
}

// A module nesting an MLP gets the full dotted prefix.
class Wrapper : public Module {
 public:
  Wrapper() {
    head_ = RegisterParameter("scale", Tensor::Full({1}, 1.0f));
    body_ = RegisterModule("body", std::make_shared<MLP>(std::vector<int64_t>{2, 2}));
  }
  Variable Forward(const Variable& x) override { return body_->Forward(x); }

 private:
  Parameter head_;
  std::shared_ptr<MLP> body_;
};

TEST(Module, NestedModulesGetDottedPrefixes) {
  Wrapper w;
  EXPECT_EQ(Names(w), (std::vector<std::string>{"scale", "body.layers.0.weight", "body.layers.0.bias"}));
  EXPECT_EQ(w.parameters()[1].name(), "body.layers.0.weight");
}

TEST(Linear, InitIsSeededUniformInPyTorchBounds) {
  Linear a(16, 8, Device::CPU(), 42), b(16, 8, Device::CPU(), 42), c(16, 8, Device::CPU(), 43);
  EXPECT_EQ(a.weight().data().ToVector(), b.weight().data().ToVector());
  EXPECT_EQ(a.bias().data().ToVector(), b.bias().data().ToVector());
  EXPECT_NE(a.weight().data().ToVector(), c.weight().data().ToVector());
  const float bound = 1.0f / std::sqrt(16.0f);
  for (float v : a.weight().data().ToVector()) {
    EXPECT_GE(v, -bound);
    EXPECT_LT(v, bound);
  }
  // Exactly the documented stream: SplitMix64(seed), weights then bias.
  SplitMix64 rng(42);
  std::vector<float> w = UniformValues(rng, 16 * 8, -bound, bound);
  std::vector<float> bias = UniformValues(rng, 8, -bound, bound);
  EXPECT_EQ(a.weight().data().ToVector(), w);
  EXPECT_EQ(a.bias().data().ToVector(), bias);
}

TEST(Rng, SplitMix64KnownValues) {
  // Reference values of SplitMix64 seeded with 0 (from the published
  // algorithm), so the stream is the same on every platform.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(rng.Next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(rng.Next(), 0x06C45D188009454FULL);
}

TEST(Mlp, LayersUseDerivedSeeds) {
  MLP mlp({3, 4, 2}, Device::CPU(), 5);
  Linear l1(4, 2, Device::CPU(), DeriveSeed(5, 1));
  EXPECT_EQ(mlp.layer(1).weight().data().ToVector(), l1.weight().data().ToVector());
  EXPECT_NE(mlp.layer(0).weight().data().ToVector()[0], mlp.layer(1).weight().data().ToVector()[0]);
}

TEST(Mlp, SkipLayersMustBeSquareAndNotLast) {
  MLP mlp({3, 4, 4, 2});
  EXPECT_TRUE(mlp.ValidateSkip({1}).ok());
  absl::Status st = mlp.ValidateSkip({0});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("3 -> 4"));
  EXPECT_THAT(std::string(mlp.ValidateSkip({2}).message()), HasSubstr("output layer"));
  EXPECT_THAT(std::string(mlp.ValidateSkip({7}).message()), HasSubstr("layers 0..2"));
  Variable x(Tensor::Zeros({1, 3}));
  EXPECT_THROW(mlp.Forward(x, {0}), TensorError);
}

TEST(Mlp, SkippedLayerGetsNoGradientAndIsUnreachable) {
  MLP mlp({3, 4, 4, 2});
  Variable x(Tensor::Full({2, 3}, 0.5f));
  Variable loss = MseLoss(mlp.Forward(x, {1}), Tensor::Zeros({2, 2}));
  auto reachable = autograd::ReachableAccumulators({loss});
  EXPECT_EQ(reachable.size(), 4u);  // layers 0 and 2, weight and bias
  ASSERT_TRUE(autograd::Backward(loss).ok());
  EXPECT_TRUE(mlp.layer(0).weight().grad().defined());
  EXPECT_FALSE(mlp.layer(1).weight().grad().defined());
  EXPECT_FALSE(mlp.layer(1).bias().grad().defined());
  EXPECT_TRUE(mlp.layer(2).bias().grad().defined());
}

// Records the forward hooks' calls: "+name" before, "-name/N" after (N outputs).
class RecordingHooks : public ForwardHooks {
 public:
  void BeforeForward(const Module& m) override { calls.push_back("+" + NameOf(m)); }
  void AfterForward(const Module& m, const std::vector<Variable>& outputs) override {
    calls.push_back("-" + NameOf(m) + "/" + std::to_string(outputs.size()));
  }
  std::string NameOf(const Module& m) const {
    auto params = m.named_parameters();
    return params.empty() ? std::string("?") : params.front().second.name();
  }
  std::vector<std::string> calls;
};

TEST(ForwardHooks, RunAroundEveryChildOfTheTree) {
  MLP mlp({3, 4, 2}, Device::CPU(), 1);
  auto hooks = std::make_shared<RecordingHooks>();
  mlp.SetForwardHooks(hooks);
  Variable out = mlp.Forward(Variable(Tensor::Zeros({2, 3})));
  EXPECT_EQ(out.data().shape(), (Shape{2, 2}));
  // The root is called directly (no hooks of its own); each layer through operator().
  EXPECT_THAT(hooks->calls, ::testing::ElementsAre("+layers.0.weight", "-layers.0.weight/1", "+layers.1.weight",
                                                   "-layers.1.weight/1"));
  mlp.SetForwardHooks(nullptr);
  hooks->calls.clear();
  (void)mlp.Forward(Variable(Tensor::Zeros({2, 3})));
  EXPECT_TRUE(hooks->calls.empty());
}

TEST(ForwardHooks, ScopeRunsAfterForwardOnceAndWithNoOutputsOnError) {
  Linear lin(3, 2, Device::CPU(), 1);
  auto hooks = std::make_shared<RecordingHooks>();
  lin.SetForwardHooks(hooks);
  {
    ForwardScope scope(lin);
    Variable y = scope.Done({Variable(Tensor::Zeros({1})), Variable(Tensor::Zeros({1}))});
    EXPECT_TRUE(y.defined());
  }
  try {
    ForwardScope scope(lin);
    throw TensorError("boom");
  } catch (const TensorError&) {
  }
  // A wrong input: the hooks still close (no outputs).
  EXPECT_THROW((void)lin(Variable(Tensor::Zeros({2, 5}))), TensorError);
  EXPECT_THAT(hooks->calls, ::testing::ElementsAre("+weight", "-weight/2", "+weight", "-weight/0", "+weight",
                                                   "-weight/0"));
}

TEST(Module, ZeroGradSetToNoneOrFillInPlace) {
  MLP mlp({2, 2});
  Variable loss = MseLoss(mlp.Forward(Variable(Tensor::Full({1, 2}, 1.0f))), Tensor::Zeros({1, 2}));
  ASSERT_TRUE(autograd::Backward(loss).ok());
  Tensor g = mlp.layer(0).weight().grad();
  ASSERT_TRUE(g.defined());
  mlp.ZeroGrad(/*set_to_none=*/false);
  EXPECT_TRUE(mlp.layer(0).weight().grad().IsSameView(g));
  EXPECT_EQ(g.ToVector(), std::vector<float>(4, 0.0f));
  mlp.ZeroGrad();
  EXPECT_FALSE(mlp.layer(0).weight().grad().defined());
}

TEST(StateDict, RoundTripInRegistrationOrderAndInPlace) {
  MLP src({3, 4, 2}, Device::CPU(), 1), dst({3, 4, 2}, Device::CPU(), 2);
  auto sd = StateDict(src);
  ASSERT_EQ(sd.size(), 4u);
  EXPECT_EQ(sd[0].first, "layers.0.weight");
  EXPECT_EQ(sd[3].first, "layers.1.bias");
  std::map<std::string, Tensor> m(sd.begin(), sd.end());
  Tensor dst_w = dst.layer(0).weight().data();
  ASSERT_TRUE(LoadStateDict(dst, m).ok());
  EXPECT_TRUE(dst.layer(0).weight().data().IsSameView(dst_w));  // loaded in place
  EXPECT_EQ(dst_w.ToVector(), src.layer(0).weight().data().ToVector());
  EXPECT_FALSE(dst_w.SharesStorageWith(src.layer(0).weight().data()));
}

TEST(StateDict, LoadErrorsNameTheParameterAndChangeNothing) {
  MLP model({3, 4, 2}, Device::CPU(), 1);
  const std::vector<float> before = model.layer(0).weight().data().ToVector();
  auto sd = StateDict(MLP({3, 4, 2}, Device::CPU(), 9));
  std::map<std::string, Tensor> m(sd.begin(), sd.end());

  auto missing = m;
  missing.erase("layers.1.bias");
  absl::Status st = LoadStateDict(model, missing);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("missing parameter 'layers.1.bias'"));

  auto unexpected = m;
  unexpected["layers.5.weight"] = Tensor::Zeros({1});
  st = LoadStateDict(model, unexpected);
  EXPECT_THAT(std::string(st.message()), HasSubstr("unexpected parameter 'layers.5.weight'"));

  auto misshaped = m;
  misshaped["layers.0.weight"] = Tensor::Zeros({3, 4});
  st = LoadStateDict(model, misshaped);
  EXPECT_THAT(std::string(st.message()), HasSubstr("'layers.0.weight' has shape [3, 4]"));

  EXPECT_EQ(model.layer(0).weight().data().ToVector(), before);
}

}  // namespace
}  // namespace psync::nn
