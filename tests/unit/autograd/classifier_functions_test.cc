// The GPT's head and loss as fused pieces: LinearPadded (the product over a
// zero-padded weight, returning the unpadded view) and FusedCrossEntropyLoss
// (loss and logits' gradient in one pass, in place): the same values and
// gradients as Linear + CrossEntropyLoss, gradchecks in float64, the
// incoming-gradient rescale, and evaluation (no grad) leaving the logits be.
#include <gtest/gtest.h>

#include <vector>

#include "tests/unit/autograd/gradcheck.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/grad_mode.h"
#include "psync/autograd/view_functions.h"

namespace psync::autograd {
namespace {

using testing::GradOk;
using testing::RandomDouble;

// padded [Vp, C]: weight's values in the first V rows (weight a view of them), zeros after.
struct PaddedWeight {
  Tensor padded;
  Variable weight;
};
PaddedWeight MakePadded(const Tensor& values, int64_t vp, const std::string& name) {
  Tensor padded = Tensor::Zeros({vp, values.size(1)}, values.dtype(), values.device());
  Tensor view = padded.Narrow(0, 0, values.size(0));
  ops::Copy(view, values);
  return {padded, Variable(view, true, name)};
}

Tensor Targets(const std::vector<int64_t>& v) { return Tensor::FromVector(v, {static_cast<int64_t>(v.size())}); }

TEST(ClassifierFunctions, LinearPaddedGradCheck) {
  const Tensor values = RandomDouble({5, 3}, 1);
  EXPECT_TRUE(GradOk(
      [&](const std::vector<Variable>& v) {
        Tensor padded = Tensor::Zeros({8, 3}, kFloat64);
        Tensor view = padded.Narrow(0, 0, 5);
        ops::Copy(view, v[1].data());  // the padded copy of the (perturbed) weight
        return LinearPadded(v[0], v[1], padded);
      },
      {RandomDouble({2, 4, 3}, 2), values}));
}

TEST(ClassifierFunctions, LinearPaddedIsLinearOnAView) {
  const Tensor x = RandomDouble({2, 3, 6}, 3).To(kFloat32), w = RandomDouble({5, 6}, 4).To(kFloat32);
  PaddedWeight p = MakePadded(w, 128, "w");
  Variable xv(x, true, "x");
  Variable y = LinearPadded(xv, p.weight, p.padded);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(y.data().stride(1), 128) << "the result is a view of the padded rows";
  Variable xr(x, true, "x"), wr(w, true, "w");
  Variable ref = Linear(xr, wr, Variable());
  EXPECT_LE(ops::MaxAbsDiff(y.data().Contiguous(), ref.data()), 1e-6);
  const Tensor g = RandomDouble({2, 3, 5}, 5).To(kFloat32);
  ASSERT_TRUE(Backward(Sum(Mul(y, Variable(g)))).ok());
  ASSERT_TRUE(Backward(Sum(Mul(ref, Variable(g)))).ok());
  EXPECT_LE(ops::MaxAbsDiff(xv.grad(), xr.grad()), 1e-6);
  EXPECT_LE(ops::MaxAbsDiff(p.weight.grad(), wr.grad()), 1e-6);
}

TEST(ClassifierFunctions, FusedLossEqualsCrossEntropyLossBitForBit) {
  // Through a head (so the gradient flows on): loss and every gradient equal.
  const Tensor x = RandomDouble({12, 8}, 6, -2, 2).To(kFloat32), w = RandomDouble({40, 8}, 7).To(kFloat32);
  const Tensor t = Targets({0, 39, 3, 3, 17, 5, 22, 1, 0, 38, 11, 2});
  std::vector<Tensor> losses, dx, dw;
  for (bool fused : {false, true}) {
    Variable xv(x, true, "x"), wv(w, true, "w");
    Variable logits = Linear(xv, wv, Variable());
    Variable loss = Scale(fused ? FusedCrossEntropyLoss(logits, t, 0.25f) : CrossEntropyLoss(logits, t), 0.25f);
    if (fused) {
      EXPECT_EQ(loss.grad_fn()->next_edges()[0].function->name(), "FusedCrossEntropyLossBackward");
    }
    ASSERT_TRUE(Backward(loss).ok());
    losses.push_back(loss.data());
    dx.push_back(xv.grad());
    dw.push_back(wv.grad());
  }
  EXPECT_EQ(losses[0].Item(), losses[1].Item());
  EXPECT_EQ(ops::MaxAbsDiff(dx[0], dx[1]), 0.0);
  EXPECT_EQ(ops::MaxAbsDiff(dw[0], dw[1]), 0.0);
}

TEST(ClassifierFunctions, FusedLossRescalesAnotherIncomingGradient) {
  const Tensor x = RandomDouble({6, 9}, 8, -3, 3);
  const Tensor t = Targets({0, 8, 4, 4, 1, 7});
  EXPECT_TRUE(GradOk(
      [&](const std::vector<Variable>& v) {
        // The logits are a fresh tensor per call (the fused loss writes over them);
        // expected 1, received 1 (GradCheck's loss weights) or not.
        return Scale(FusedCrossEntropyLoss(Scale(v[0], 1.0f), t, 1.0f), 3.0f);
      },
      {x}));
}

TEST(ClassifierFunctions, WithoutGradTheLogitsStay) {
  const Tensor x = RandomDouble({4, 5}, 9);
  const Tensor t = Targets({0, 1, 2, 3});
  Variable logits(x.Clone(), false);
  const Tensor loss = FusedCrossEntropyLoss(logits, t).data();
  EXPECT_EQ(ops::MaxAbsDiff(logits.data(), x), 0.0);
  EXPECT_EQ(loss.Item<double>(), ops::CrossEntropy(x, t).Item<double>());
  {
    NoGradGuard no_grad;
    Variable l2(x.Clone(), true);
    FusedCrossEntropyLoss(l2, t);
    EXPECT_EQ(ops::MaxAbsDiff(l2.data(), x), 0.0);
  }
}

}  // namespace
}  // namespace psync::autograd
