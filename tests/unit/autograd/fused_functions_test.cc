// The fused differentiable functions of the GPT (ResidualLayerNorm, Mlp)
// and the precision helpers (Cast, Linear reading a weight's bfloat16
// copy): float64 finite-difference checks of the real ops, the fused
// functions against the unfused graph bit for bit in float32 (values and
// every gradient), and bfloat16 activations with float32 parameter
// gradients.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/autograd/gradcheck.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/nn_functions.h"
#include "psync/tensor/ops.h"

namespace psync::autograd {
namespace {

using testing::GradOk;
using testing::RandomDouble;

Tensor RandomFloat(const Shape& shape, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  return RandomDouble(shape, seed, lo, hi).To(kFloat32);
}

void ExpectSameBits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(a.To(kFloat32).ToVector(), b.To(kFloat32).ToVector()) << what;
}

// Leaves of the given values, requiring grad.
std::vector<Variable> Leaves(const std::vector<Tensor>& values) {
  std::vector<Variable> out;
  for (size_t i = 0; i < values.size(); ++i) out.emplace_back(values[i].Clone(), true, "leaf" + std::to_string(i));
  return out;
}

// Sum(w * y), a scalar that weighs every output element.
Variable Weighted(const Variable& y, uint32_t seed) {
  return Sum(Mul(y, Variable(RandomDouble(y.shape(), seed, 0.5, 1.5).To(y.data().dtype()))));
}

TEST(FusedFunctions, ResidualLayerNormGradCheck) {
  const int64_t C = 6;
  auto fn = [](const std::vector<Variable>& v) {
    auto [h, y] = ResidualLayerNorm(v[0], v[1], v[2], v[3], 1e-5, kFloat64);
    return Add(Scale(h, 0.7f), y);  // both outputs feed the loss
  };
  EXPECT_TRUE(GradOk(fn, {RandomDouble({2, 3, C}, 1, -2, 2), RandomDouble({2, 3, C}, 2), RandomDouble({C}, 3, 0.5, 1.5),
                             RandomDouble({C}, 4)}));
  // Only y used (the last block's h feeds nothing), and only h used.
  auto only_y = [](const std::vector<Variable>& v) { return ResidualLayerNorm(v[0], v[1], v[2], v[3], 1e-5, kFloat64).second; };
  EXPECT_TRUE(GradOk(only_y, {RandomDouble({4, C}, 5), RandomDouble({4, C}, 6), RandomDouble({C}, 7), RandomDouble({C}, 8)}));
  auto only_h = [](const std::vector<Variable>& v) { return ResidualLayerNorm(v[0], v[1], v[2], v[3], 1e-5, kFloat64).first; };
  testing::GradCheckOptions skip_params;
  skip_params.constant_inputs = {2, 3};
  EXPECT_TRUE(GradOk(only_h, {RandomDouble({4, C}, 9), RandomDouble({4, C}, 10), RandomDouble({C}, 11), RandomDouble({C}, 12)},
                        skip_params));
}

TEST(FusedFunctions, MlpGradCheck) {
  const int64_t C = 4, H = 10;
  auto fn = [](const std::vector<Variable>& v) { return Mlp(v[0], {v[1], v[2], v[3], v[4], Tensor(), Tensor()}); };
  EXPECT_TRUE(GradOk(fn, {RandomDouble({2, 3, C}, 21, -2, 2), RandomDouble({H, C}, 22), RandomDouble({H}, 23),
                             RandomDouble({C, H}, 24), RandomDouble({C}, 25)}));
}

// The float32 GPT-block pieces, fused and unfused: the same values and
// gradients, bit for bit (the PyTorch exactness of the float32 model rests
// on it).
TEST(FusedFunctions, Float32FusedEqualsUnfusedBitForBit) {
  const int64_t N = 12, C = 8, H = 32;
  const std::vector<Tensor> init = {RandomFloat({N, C}, 31, -2, 2), RandomFloat({N, C}, 32), RandomFloat({C}, 33, 0.5, 1.5),
                                    RandomFloat({C}, 34),         RandomFloat({H, C}, 35), RandomFloat({H}, 36),
                                    RandomFloat({C, H}, 37),      RandomFloat({C}, 38)};
  std::vector<Variable> f = Leaves(init), u = Leaves(init);
  // fused: (h, y) = ResidualLayerNorm(x, a); out = h + Mlp(y)
  auto [fh, fy] = ResidualLayerNorm(f[0], f[1], f[2], f[3], 1e-5, kFloat32);
  Variable fout = Add(fh, Mlp(fy, {f[4], f[5], f[6], f[7], Tensor(), Tensor()}));
  // unfused: h = x + a; y = LayerNorm(h); out = h + proj(gelu(fc(y)))
  Variable uh = Add(u[0], u[1]);
  Variable uy = LayerNorm(uh, u[2], u[3], 1e-5);
  Variable uout = Add(uh, Linear(Gelu(Linear(uy, u[4], u[5])), u[6], u[7]));
  ExpectSameBits(fout.data(), uout.data(), "output");
  ASSERT_TRUE(Backward(Weighted(fout, 39)).ok());
  ASSERT_TRUE(Backward(Weighted(uout, 39)).ok());
  for (size_t i = 0; i < f.size(); ++i) ExpectSameBits(f[i].grad(), u[i].grad(), "grad of leaf " + std::to_string(i));
}

// bfloat16 activations: the products read bf16 weight values, the
// parameters' gradients come out float32 (their own dtype), and the
// result is close to the float32 computation.
TEST(FusedFunctions, Bf16ActivationsGiveFloat32ParameterGradients) {
  const int64_t N = 16, C = 8, H = 32;
  const std::vector<Tensor> init = {RandomFloat({N, C}, 41, -2, 2), RandomFloat({N, C}, 42), RandomFloat({C}, 43, 0.5, 1.5),
                                    RandomFloat({C}, 44),         RandomFloat({H, C}, 45), RandomFloat({H}, 46),
                                    RandomFloat({C, H}, 47),      RandomFloat({C}, 48)};
  std::vector<Variable> b = Leaves(init), r = Leaves(init);
  // a arrives as bfloat16 (a block's output); y goes out as bfloat16.
  auto [bh, by] = ResidualLayerNorm(b[0], Cast(b[1], kBFloat16), b[2], b[3], 1e-5, kBFloat16);
  EXPECT_EQ(bh.data().dtype(), kFloat32);
  EXPECT_EQ(by.data().dtype(), kBFloat16);
  Variable bm = Mlp(by, {b[4], b[5], b[6], b[7], b[4].data().To(kBFloat16), b[6].data().To(kBFloat16)});
  EXPECT_EQ(bm.data().dtype(), kBFloat16);
  Variable bout = Add(bh, Cast(bm, kFloat32));
  auto [rh, ry] = ResidualLayerNorm(r[0], r[1], r[2], r[3], 1e-5, kFloat32);
  Variable rout = Add(rh, Mlp(ry, {r[4], r[5], r[6], r[7], Tensor(), Tensor()}));
  EXPECT_LT(ops::MaxAbsDiff(bout.data(), rout.data()), 0.05);
  ASSERT_TRUE(Backward(Weighted(bout, 49)).ok());
  ASSERT_TRUE(Backward(Weighted(rout, 49)).ok());
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_EQ(b[i].grad().dtype(), kFloat32) << "leaf " << i;
    const double scale = ops::MaxAbsDiff(r[i].grad(), ops::Scale(r[i].grad(), 0.0f));  // max |grad|
    EXPECT_LE(ops::MaxAbsDiff(b[i].grad(), r[i].grad()), 0.05 * scale + 1e-3) << "leaf " << i;
  }
}

TEST(FusedFunctions, CastAndLinearWithAWeightValue) {
  Variable x(RandomFloat({5, 6}, 51), true, "x");
  Variable w(RandomFloat({3, 6}, 52), true, "w");
  Variable bias(RandomFloat({3}, 53), true, "b");
  Variable c = Cast(x, kBFloat16);
  EXPECT_EQ(c.data().dtype(), kBFloat16);
  EXPECT_TRUE(Cast(x, kFloat32).is_same(x));  // no node for a no-op
  Variable y = Linear(c, w, bias, w.data().To(kBFloat16));
  EXPECT_EQ(y.data().dtype(), kBFloat16);
  ASSERT_TRUE(Backward(Sum(Cast(y, kFloat32))).ok());
  EXPECT_EQ(x.grad().dtype(), kFloat32);  // Cast's backward converts back
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(bias.grad().dtype(), kFloat32);
  // d/dw sum(x w^T + b) = column sums of x (bf16-rounded x, float32 accumulation).
  const Tensor want = ops::Matmul(Tensor::Full({3, 5}, 1.0, kFloat32), x.data().To(kBFloat16).To(kFloat32));
  EXPECT_LT(ops::MaxAbsDiff(w.grad(), want), 1e-5);
  EXPECT_EQ(bias.grad().ToVector(), std::vector<float>(3, 5.0f));
  EXPECT_THROW(Linear(c, w, bias, Tensor::Zeros({6, 3})), TensorError);
}

}  // namespace
}  // namespace psync::autograd
