// Float64 gradient checks of the shape functions (Reshape, Permute,
// Transpose, Split with several outputs), BatchedMatmul on strided views,
// N-D Linear and CrossEntropyLoss, plus the view semantics they rely on.
#include "psync/autograd/view_functions.h"

#include <gtest/gtest.h>

#include "tests/unit/autograd/gradcheck.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"

namespace psync::autograd {
namespace {

using testing::GradOk;
using testing::RandomDouble;

TEST(ViewFunctions, ReshapePermuteTransposeGradCheck) {
  EXPECT_TRUE(GradOk([](const std::vector<Variable>& v) { return Reshape(v[0], {3, -1}); }, {RandomDouble({2, 6}, 1)}));
  EXPECT_TRUE(GradOk([](const std::vector<Variable>& v) { return Permute(v[0], {2, 0, 1}); },
                        {RandomDouble({2, 3, 4}, 2)}));
  // A reshape of a permuted (non-contiguous) view copies; the gradient still maps back.
  EXPECT_TRUE(GradOk([](const std::vector<Variable>& v) { return Reshape(Transpose(v[0], 0, 1), {-1}); },
                        {RandomDouble({3, 4}, 3)}));
}

TEST(ViewFunctions, SplitHasOneOutputPerPieceAndAGradientForEach) {
  Variable x(RandomDouble({2, 7}, 4), true, "x");
  std::vector<Variable> parts = Split(x, {3, 4}, -1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(parts[0].grad_fn() == parts[1].grad_fn());
  EXPECT_EQ(parts[1].output_nr(), 1u);
  EXPECT_EQ(parts[0].grad_fn()->num_outputs(), 2u);
  EXPECT_TRUE(parts[1].data().SharesStorageWith(x.data()));  // views, no copy
  // Both pieces used, in different ways.
  EXPECT_TRUE(GradOk(
      [](const std::vector<Variable>& v) {
        std::vector<Variable> p = Split(v[0], {2, 3, 2}, 1);
        return Add(Sum(Mul(p[0], p[2])), Scale(Sum(Mul(p[1], p[1])), 3.0f));
      },
      {RandomDouble({4, 7}, 5)}));
}

TEST(ViewFunctions, SplitPieceWithoutGradientGetsZeros) {
  Variable x(RandomDouble({3, 6}, 6), true, "x");
  std::vector<Variable> p = Split(x, {2, 2, 2}, 1);
  ASSERT_TRUE(Backward(Sum(p[1])).ok());  // only the middle piece reaches the loss
  const std::vector<double> g = x.grad().ToVector<double>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(g[i * 6 + j], (j == 2 || j == 3) ? 1.0 : 0.0) << i << "," << j;
  EXPECT_THROW(Split(x, {2, 2}, 1), TensorError);
}

TEST(ViewFunctions, AttentionLayoutGradCheck) {
  // q, k from one [B, T, 3C] tensor, split and permuted into heads; scores q k^T.
  const int64_t B = 2, T = 3, H = 2, hs = 2, C = H * hs;
  EXPECT_TRUE(GradOk(
      [&](const std::vector<Variable>& v) {
        std::vector<Variable> qkv = Split(v[0], {C, C, C}, 2);
        auto heads = [&](const Variable& t) { return Permute(Reshape(t, {B, T, H, hs}), {0, 2, 1, 3}); };
        Variable att = BatchedMatmul(heads(qkv[0]), Transpose(heads(qkv[1]), -2, -1));  // [B,H,T,T]
        return BatchedMatmul(att, heads(qkv[2]));                                        // [B,H,T,hs]
      },
      {RandomDouble({B, T, 3 * C}, 7)}));
}

TEST(ViewFunctions, LinearOnThreeDimsAndCrossEntropyGradCheck) {
  EXPECT_TRUE(GradOk([](const std::vector<Variable>& v) { return Linear(v[0], v[1], v[2]); },
                        {RandomDouble({2, 3, 4}, 8), RandomDouble({5, 4}, 9), RandomDouble({5}, 10)}));
  const Tensor targets = Tensor::FromVector(std::vector<int64_t>{2, 0, 4}, {3});
  EXPECT_TRUE(GradOk([&](const std::vector<Variable>& v) { return CrossEntropyLoss(v[0], targets); },
                        {RandomDouble({3, 5}, 11, -3, 3)}));
}

}  // namespace
}  // namespace psync::autograd
