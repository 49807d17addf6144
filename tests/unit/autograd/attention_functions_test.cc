// Float64 gradient checks of the fused causal attention
// (autograd::CausalAttention, ops/attention.h): one tile, several tiles with
// a ragged end (T = 70 against 64-row tiles), and as the GPT calls it on the
// head views of one qkv projection; the fused path's gradients against the
// materialized path's; what its node saves and releases.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/unit/autograd/gradcheck.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/nn_functions.h"
#include "psync/autograd/view_functions.h"

namespace psync::autograd {
namespace {

using testing::GradOk;
using testing::RandomDouble;

// The GPT's attention without c_proj, from a qkv projection [B, T, 3C]:
// fused or through the materialized [B, H, T, T] scores.
Variable HeadsAttention(const Variable& qkv, int64_t H, bool fused) {
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1], C = qkv.shape()[2] / 3, hs = C / H;
  std::vector<Variable> parts = Split(qkv, {C, C, C}, 2);
  auto heads = [&](const Variable& t) { return Permute(Reshape(t, {B, T, H, hs}), {0, 2, 1, 3}); };
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Variable y = fused ? CausalAttention(heads(parts[0]), heads(parts[1]), heads(parts[2]), scale)
                     : BatchedMatmul(CausalSoftmax(BatchedMatmul(heads(parts[0]), Transpose(heads(parts[1]), -2, -1)),
                                                   scale),
                                     heads(parts[2]));
  return Reshape(Permute(y, {0, 2, 1, 3}), {B, T, C});
}

TEST(AttentionFunctions, GradCheckOneTile) {
  EXPECT_TRUE(GradOk([](const std::vector<Variable>& v) { return CausalAttention(v[0], v[1], v[2], 0.7); },
                        {RandomDouble({2, 2, 5, 3}, 1, -2, 2), RandomDouble({2, 2, 5, 3}, 2, -2, 2),
                         RandomDouble({2, 2, 5, 3}, 3)}));
}

TEST(AttentionFunctions, GradCheckSeveralTilesWithARaggedEnd) {
  // T = 70: two query tiles and two key tiles (64 + 6 rows), the second key
  // tile seen only by the second query tile; scores of several units so the
  // online softmax rescales.
  EXPECT_TRUE(GradOk([](const std::vector<Variable>& v) { return CausalAttention(v[0], v[1], v[2], 1.3); },
                        {RandomDouble({1, 1, 70, 2}, 4, -2, 2), RandomDouble({1, 1, 70, 2}, 5, -2, 2),
                         RandomDouble({1, 1, 70, 2}, 6)}));
}

TEST(AttentionFunctions, GradCheckOnTheHeadViewsOfAProjection) {
  const int64_t B = 2, T = 3, H = 2, hs = 2;
  EXPECT_TRUE(GradOk([&](const std::vector<Variable>& v) { return HeadsAttention(v[0], H, true); },
                        {RandomDouble({B, T, 3 * H * hs}, 7)}));
}

TEST(AttentionFunctions, FusedGradientsEqualTheMaterializedPathsInFloat64) {
  const Tensor qkv = RandomDouble({2, 67, 3 * 4 * 8}, 8, -2, 2), w = RandomDouble({2, 67, 32}, 9);
  std::vector<Tensor> grads, outs;
  for (bool fused : {true, false}) {
    Variable x(qkv, true, "qkv");
    Variable y = HeadsAttention(x, 4, fused);
    ASSERT_TRUE(Backward(Sum(Mul(y, Variable(w)))).ok());
    outs.push_back(y.data());
    grads.push_back(x.grad());
  }
  EXPECT_LE(ops::MaxAbsDiff(outs[0], outs[1]), 1e-12);
  EXPECT_LE(ops::MaxAbsDiff(grads[0], grads[1]), 1e-12);
}

TEST(AttentionFunctions, NodeIsNamedSavesNoProbabilitiesAndReleases) {
  Variable q(RandomDouble({1, 2, 4, 3}, 10), true, "q"), k(RandomDouble({1, 2, 4, 3}, 11), true, "k");
  Variable v(RandomDouble({1, 2, 4, 3}, 12), false, "v");
  Variable y = CausalAttention(q, k, v, 0.5);
  EXPECT_EQ(y.grad_fn()->name(), "CausalAttentionBackward");
  EXPECT_EQ(y.shape(), (Shape{1, 2, 4, 3}));
  ASSERT_TRUE(Backward(Sum(y)).ok());
  EXPECT_TRUE(q.grad().defined());
  EXPECT_TRUE(k.grad().defined());
  EXPECT_FALSE(v.grad().defined());
  absl::Status again = Backward(Sum(y));
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_NE(again.message().find("CausalAttentionBackward"), std::string::npos) << again;
  // Nothing requires grad: no node.
  EXPECT_EQ(CausalAttention(Variable(q.data()), Variable(k.data()), v, 0.5).grad_fn(), nullptr);
}

}  // namespace
}  // namespace psync::autograd
