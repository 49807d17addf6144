// bfloat16 on the CPU against float32 on the CPU: every op a bf16 step runs
// (matrix products through oneDNN, with and without epilogues; LayerNorm
// and its residual-fused form; GELU; causal softmax; cross-entropy; the
// reductions; elementwise ops; AdamW writing the bf16 weight copy).
//
// The reference is the float32 op on the bfloat16-rounded inputs. Where the
// bf16 kernel computes exactly the float32 kernel's float and rounds once
// (every elementwise and row-wise op), the result must equal the float32
// result rounded to bfloat16 bit for bit; matrix products accumulate in
// another order (oneDNN vs OpenBLAS), so they are within bfloat16 rounding
// (2^-8 relative) plus float32 accumulation round-off. Also: the float32
// forms of the new fused ops give the unfused ops' bits exactly.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/unit/tensor/test_util.h"
#include "psync/tensor/ops.h"

namespace psync {
namespace {

using ::psync::testing::ExpectTensorError;
using ::psync::testing::RandomLabels;
using ::psync::testing::RandomTensor;

Tensor Bf16(const Tensor& t) { return t.To(kBFloat16); }
// The bfloat16 value of t, back in float32 (exact).
Tensor Rounded(const Tensor& t) { return t.To(kBFloat16).To(kFloat32); }
std::vector<float> F32(const Tensor& t) { return t.To(kFloat32).ToVector(); }

void ExpectSameBits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = F32(got), w = F32(want);
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])))
        << what << " element " << i << ": " << g[i] << " vs " << w[i];
  }
}

// |got - want| <= rel * |want| + abs element by element.
void ExpectNear(const Tensor& got, const Tensor& want, double rel, double abs, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = F32(got), w = F32(want);
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_LE(std::fabs(static_cast<double>(g[i]) - w[i]), rel * std::fabs(w[i]) + abs)
        << what << " element " << i << ": " << g[i] << " vs " << w[i];
  }
}

constexpr double kBf16Rel = 1.0 / 256;  // one bfloat16 rounding (2^-8 is twice the unit roundoff)

// ---------------------------------------------------------------- matrix products

TEST(Bf16OpsCpu, MatmulAllTransposesAndShapes) {
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {3, 5, 7}, {64, 32, 64}, {100, 129, 33}, {256, 128, 384}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const std::string what = absl::StrCat(m, "x", k, "x", n, " ta=", ta, " tb=", tb);
        Tensor a = RandomTensor(ta ? Shape{k, m} : Shape{m, k}, 1 + m + k, Device::CPU());
        Tensor b = RandomTensor(tb ? Shape{n, k} : Shape{k, n}, 2 + n, Device::CPU());
        Tensor want = ops::Matmul(Rounded(a), Rounded(b), ta, tb);
        Tensor got = ops::Matmul(Bf16(a), Bf16(b), ta, tb);
        EXPECT_EQ(got.dtype(), kBFloat16) << what;
        // Inputs in [-1, 1): sums of k products; float32 accumulation differs by ~k ulp.
        ExpectNear(got, want, kBf16Rel, 1e-6 * k, what);
        // Into a float32 destination: no bfloat16 rounding at all.
        Tensor f = ops::MatmulInto(Tensor::Empty({m, n}, kFloat32), Bf16(a), Bf16(b), ta, tb);
        ExpectNear(f, want, 1e-6, 1e-6 * k, what + " into float32");
      }
    }
  }
}

TEST(Bf16OpsCpu, MatmulOnStridedViewsAndBatches) {
  // The attention's products: heads as [B, H, T, hs] views of a [B, T, 3C]
  // projection (batch dims that do not collapse), k transposed.
  const int64_t B = 2, T = 16, H = 4, hs = 8, C = H * hs;
  Tensor qkv = RandomTensor({B, T, 3 * C}, 5);
  auto heads = [&](const Tensor& t, int64_t i) { return t.Narrow(2, i * C, C).Reshape({B, T, H, hs}).Permute({0, 2, 1, 3}); };
  Tensor qb = Bf16(qkv), qf = Rounded(qkv);
  Tensor want = ops::BatchedMatmul(heads(qf, 0), heads(qf, 1).Transpose(-2, -1));
  Tensor got = ops::BatchedMatmul(heads(qb, 0), heads(qb, 1).Transpose(-2, -1));
  ExpectNear(got, want, kBf16Rel, 1e-5, "q k^T");
  Tensor att = RandomTensor({B, H, T, T}, 6, Device::CPU(), 0.0f, 1.0f);
  ExpectNear(ops::BatchedMatmul(Bf16(att), heads(qb, 2)), ops::BatchedMatmul(Rounded(att), heads(qf, 2)), kBf16Rel,
             1e-5, "att v");
  // A contiguous batch (one stride) and a slice with a row stride.
  Tensor a = RandomTensor({3, 10, 12}, 7), b = RandomTensor({3, 12, 9}, 8);
  ExpectNear(ops::BatchedMatmul(Bf16(a), Bf16(b)), ops::BatchedMatmul(Rounded(a), Rounded(b)), kBf16Rel, 1e-5,
             "contiguous batch");
  Tensor wide = RandomTensor({20, 30}, 9);
  ExpectNear(ops::Matmul(Bf16(wide).Narrow(1, 5, 12), Bf16(b).Narrow(0, 0, 1).Reshape({12, 9})),
             ops::Matmul(Rounded(wide).Narrow(1, 5, 12), Rounded(b).Narrow(0, 0, 1).Reshape({12, 9})), kBf16Rel, 1e-5,
             "row-strided slice");
}

TEST(Bf16OpsCpu, LinearEpiloguesAgainstUnfusedOps) {
  const int64_t N = 48, in = 40, out = 24;
  Tensor x = RandomTensor({N, in}, 11), w = RandomTensor({out, in}, 12), bias = RandomTensor({out}, 13);
  // float32: exactly Matmul then AddBias / Gelu / GeluBackward (the bits of the ops before epilogues).
  Tensor lin = ops::Linear(x, w, bias);
  ExpectSameBits(lin, ops::AddBias(ops::Matmul(x, w, false, true), bias), "Linear float32");
  ExpectSameBits(ops::Linear(x, w, Tensor()), ops::Matmul(x, w, false, true), "Linear without bias");
  ops::LinearGeluResult lg = ops::LinearGelu(x, w, bias);
  ExpectSameBits(lg.pre, lin, "LinearGelu pre float32");
  ExpectSameBits(lg.y, ops::Gelu(lin), "LinearGelu y float32");
  Tensor g = RandomTensor({N, in}, 14), w2 = RandomTensor({in, out}, 15);
  ExpectSameBits(ops::MatmulGeluBackward(g, w2, lg.pre), ops::GeluBackward(ops::Matmul(g, w2), lg.pre),
                 "MatmulGeluBackward float32");
  // bfloat16: the float32 ops on rounded inputs, one rounding at the end.
  Tensor lb = ops::Linear(Bf16(x), Bf16(w), bias);
  EXPECT_EQ(lb.dtype(), kBFloat16);
  ExpectNear(lb, ops::Linear(Rounded(x), Rounded(w), bias), kBf16Rel, 1e-5 * in, "Linear bf16");
  ops::LinearGeluResult lgb = ops::LinearGelu(Bf16(x), Bf16(w), bias);
  ExpectNear(lgb.pre, lin, kBf16Rel, 2e-2, "LinearGelu pre bf16");
  // y is gelu of the stored pre, rounded once.
  ExpectSameBits(lgb.y, ops::Gelu(lgb.pre.To(kFloat32)).To(kBFloat16), "LinearGelu y bf16 from its pre");
  Tensor dg = ops::MatmulGeluBackward(Bf16(g), Bf16(w2), lgb.pre);
  Tensor dg_want = ops::GeluBackward(ops::Matmul(Rounded(g), Rounded(w2)), lgb.pre.To(kFloat32));
  ExpectNear(dg, dg_want, kBf16Rel, 1e-5 * out, "MatmulGeluBackward bf16");
  ExpectTensorError([&] { ops::Linear(Bf16(x), Bf16(w), Bf16(bias)); }, {"bias must be a [24] float32 tensor"});
  ExpectTensorError([&] { ops::MatmulInto(Tensor::Empty({N, out}, kFloat64), Bf16(x), Bf16(w), false, true); },
                    {"output must be a contiguous [48, 24] bfloat16 (or float32) tensor"});
}

// ---------------------------------------------------------------- row-wise and elementwise ops

TEST(Bf16OpsCpu, LayerNormForwardAndResidualForm) {
  const int64_t rows = 37, C = 48;
  Tensor x = RandomTensor({rows, C}, 21, Device::CPU(), -3.0f, 3.0f);
  Tensor w = RandomTensor({C}, 22, Device::CPU(), 0.5f, 1.5f), b = RandomTensor({C}, 23);
  ops::LayerNormResult f = ops::LayerNorm(x, w, b, 1e-5);
  // float32 x, bfloat16 y: the float32 y rounded once.
  ops::LayerNormResult h = ops::LayerNorm(x, w, b, 1e-5, kBFloat16);
  ExpectSameBits(h.y, f.y.To(kBFloat16), "LayerNorm float32 -> bf16");
  ExpectSameBits(h.mean, f.mean, "mean");
  ExpectSameBits(h.rstd, f.rstd, "rstd");
  // bfloat16 x: float32 statistics of the bf16 values.
  ops::LayerNormResult hb = ops::LayerNorm(Bf16(x), w, b, 1e-5);
  ExpectSameBits(hb.y, ops::LayerNorm(Rounded(x), w, b, 1e-5).y.To(kBFloat16), "LayerNorm bf16 x");
  // Residual form: h = x + a, then LayerNorm(h): float32 = Add then LayerNorm bit for bit.
  Tensor a = RandomTensor({rows, C}, 24);
  ops::ResidualLayerNormResult r = ops::ResidualLayerNorm(x, a, w, b, 1e-5, kFloat32);
  Tensor sum = ops::Add(x, a);
  ExpectSameBits(r.h, sum, "ResidualLayerNorm h");
  ExpectSameBits(r.y, ops::LayerNorm(sum, w, b, 1e-5).y, "ResidualLayerNorm y");
  // bfloat16 a and y, float32 h.
  ops::ResidualLayerNormResult rb = ops::ResidualLayerNorm(x, Bf16(a), w, b, 1e-5, kBFloat16);
  Tensor sum_b = ops::Add(x, Rounded(a));
  ExpectSameBits(rb.h, sum_b, "ResidualLayerNorm h from bf16 a");
  ExpectSameBits(rb.y, ops::LayerNorm(sum_b, w, b, 1e-5).y.To(kBFloat16), "ResidualLayerNorm y bf16");
  ExpectTensorError([&] { ops::ResidualLayerNorm(Bf16(x), a, w, b, 1e-5, kFloat32); },
                    {"ResidualLayerNorm", "x (the residual stream) must be float32 or float64"});
}

TEST(Bf16OpsCpu, LayerNormBackwardWithBf16GradAndResidualGrad) {
  const int64_t rows = 70, C = 40;  // more than two row chunks
  Tensor x = RandomTensor({rows, C}, 31, Device::CPU(), -2.0f, 2.0f);
  Tensor w = RandomTensor({C}, 32, Device::CPU(), 0.5f, 1.5f), b = RandomTensor({C}, 33);
  ops::LayerNormResult f = ops::LayerNorm(x, w, b, 1e-5);
  Tensor g = RandomTensor({rows, C}, 34);
  ops::LayerNormGrads want = ops::LayerNormBackward(Rounded(g), x, w, f.mean, f.rstd);
  ops::LayerNormGrads got = ops::LayerNormBackward(Bf16(g), x, w, f.mean, f.rstd);
  EXPECT_EQ(got.dx.dtype(), kFloat32);
  ExpectSameBits(got.dx, want.dx, "dx from bf16 grad");
  ExpectSameBits(got.dweight, want.dweight, "dweight from bf16 grad");
  ExpectSameBits(got.dbias, want.dbias, "dbias from bf16 grad");
  // residual_grad is added to dx (float32: one rounding, as the engine's Add).
  Tensor rg = RandomTensor({rows, C}, 35);
  ops::LayerNormGrads with = ops::LayerNormBackward(g, x, w, f.mean, f.rstd, Tensor(), Tensor(), rg);
  ExpectSameBits(with.dx, ops::Add(ops::LayerNormBackward(g, x, w, f.mean, f.rstd).dx, rg), "dx + residual_grad");
}

TEST(Bf16OpsCpu, GeluSoftmaxCrossEntropyRoundOnce) {
  Tensor x = RandomTensor({1000}, 41, Device::CPU(), -6.0f, 6.0f);
  ExpectSameBits(ops::Gelu(Bf16(x)), ops::Gelu(Rounded(x)).To(kBFloat16), "Gelu");
  Tensor g = RandomTensor({1000}, 42);
  ExpectSameBits(ops::GeluBackward(Bf16(g), Bf16(x)), ops::GeluBackward(Rounded(g), Rounded(x)).To(kBFloat16),
                 "GeluBackward");
  ExpectSameBits(ops::GeluBackward(g, Bf16(x)), ops::GeluBackward(g, Rounded(x)).To(kBFloat16),
                 "GeluBackward float32 grad");
  // Causal softmax: the scaled score is rounded to bf16 first (torch's bf16
  // `att * scale`), so the reference gets pre-scaled rounded scores.
  const int64_t T = 24;
  const double scale = 0.25;  // a power of two: x * scale is exact, and so its rounding
  Tensor s = RandomTensor({3, T, T}, 43, Device::CPU(), -4.0f, 4.0f);
  Tensor p = ops::CausalSoftmax(Bf16(s), scale);
  ExpectSameBits(p, ops::CausalSoftmax(Rounded(s), scale).To(kBFloat16), "CausalSoftmax");
  Tensor gp = RandomTensor({3, T, T}, 44);
  ExpectSameBits(ops::CausalSoftmaxBackward(Bf16(gp), p, scale),
                 ops::CausalSoftmaxBackward(Rounded(gp), p.To(kFloat32), scale).To(kBFloat16), "CausalSoftmaxBackward");
  // Cross-entropy of bf16 logits: a float32 loss; dlogits in bf16.
  Tensor logits = RandomTensor({33, 300}, 45, Device::CPU(), -5.0f, 5.0f);
  Tensor targets = RandomLabels(33, 300, 46);
  Tensor loss = ops::CrossEntropy(Bf16(logits), targets);
  EXPECT_EQ(loss.dtype(), kFloat32);
  ExpectSameBits(loss, ops::CrossEntropy(Rounded(logits), targets), "CrossEntropy");
  Tensor one = Tensor::Scalar(1.0f);
  ExpectSameBits(ops::CrossEntropyBackward(one, Bf16(logits), targets),
                 ops::CrossEntropyBackward(one, Rounded(logits), targets).To(kBFloat16), "CrossEntropyBackward");
  ExpectTensorError([&] { ops::CrossEntropyBackward(Bf16(one), Bf16(logits), targets); },
                    {"grad must have the loss's dtype"});
}

TEST(Bf16OpsCpu, ReductionsAndElementwise) {
  Tensor x = RandomTensor({130, 24}, 51);
  Tensor xb = Bf16(x), xr = Rounded(x);
  ExpectSameBits(ops::SumRows(xb), ops::SumRows(xr), "SumRows");  // float32 out
  ExpectSameBits(ops::Sum(xb), ops::Sum(xr), "Sum");
  ExpectSameBits(ops::Mean(xb), ops::Mean(xr), "Mean");
  EXPECT_EQ(ops::SumOfSquares(xb).Item<double>(), ops::SumOfSquares(xr).Item<double>());
  Tensor y = RandomTensor({130, 24}, 52);
  Tensor yb = Bf16(y), yr = Rounded(y);
  ExpectSameBits(ops::Add(xb, yb), ops::Add(xr, yr).To(kBFloat16), "Add");
  ExpectSameBits(ops::Sub(xb, yb), ops::Sub(xr, yr).To(kBFloat16), "Sub");
  ExpectSameBits(ops::Mul(xb, yb), ops::Mul(xr, yr).To(kBFloat16), "Mul");
  ExpectSameBits(ops::Scale(xb, 0.3f), ops::Scale(xr, 0.3f).To(kBFloat16), "Scale");
  ExpectSameBits(ops::Relu(xb), ops::Relu(xr).To(kBFloat16), "Relu");
  ExpectSameBits(ops::ReluBackward(yb, xb), ops::ReluBackward(yr, xr).To(kBFloat16), "ReluBackward");
  Tensor bias = RandomTensor({24}, 53);
  ExpectSameBits(ops::AddBias(xb, Bf16(bias)), ops::AddBias(xr, Rounded(bias)).To(kBFloat16), "AddBias");
  Tensor acc = yb.Clone();
  ops::Axpy(0.5f, xb, acc);
  ExpectSameBits(acc, ops::Add(yr, ops::Scale(xr, 0.5f)).To(kBFloat16), "Axpy");
}

// ---------------------------------------------------------------- optimizer

TEST(Bf16OpsCpu, AdamWWritesTheBf16CopyWithoutChangingTheUpdate) {
  const Shape shape = {300};
  Tensor p0 = RandomTensor(shape, 61), g = RandomTensor(shape, 62);
  ops::AdamWStep h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  h.step = 3;
  Tensor p_plain = p0.Clone(), m1 = Tensor::Zeros(shape), v1 = Tensor::Zeros(shape);
  ops::AdamWUpdate(p_plain, g, m1, v1, h);
  Tensor p_copy = p0.Clone(), m2 = Tensor::Zeros(shape), v2 = Tensor::Zeros(shape);
  Tensor copy = Tensor::Empty(shape, kBFloat16);
  ops::AdamWUpdate(p_copy, g, m2, v2, h, copy);
  ExpectSameBits(p_copy, p_plain, "p");
  ExpectSameBits(m2, m1, "m");
  ExpectSameBits(v2, v1, "v");
  ExpectSameBits(copy, p_plain.To(kBFloat16), "copy");
  // Many parameters in one call: each as its own update.
  Tensor q0 = RandomTensor({7, 5}, 63), gq = RandomTensor({7, 5}, 64);
  Tensor pa = p0.Clone(), ma = Tensor::Zeros(shape), va = Tensor::Zeros(shape), ca = Tensor::Empty(shape, kBFloat16);
  Tensor qa = q0.Clone(), mq = Tensor::Zeros({7, 5}), vq = Tensor::Zeros({7, 5});
  ops::AdamWStep hq = h;
  hq.step = 1;
  hq.weight_decay = 0;
  ops::AdamWUpdateMany({{pa, g, ma, va, ca, h}, {qa, gq, mq, vq, Tensor(), hq}});
  ExpectSameBits(pa, p_plain, "many: p");
  ExpectSameBits(ca, copy, "many: copy");
  Tensor qs = q0.Clone(), ms = Tensor::Zeros({7, 5}), vs = Tensor::Zeros({7, 5});
  ops::AdamWUpdate(qs, gq, ms, vs, hq);
  ExpectSameBits(qa, qs, "many: second parameter");
  ExpectTensorError([&] { ops::AdamWUpdate(p_copy, g, m2, v2, h, Tensor::Empty(shape)); },
                    {"AdamWUpdate", "p_copy must be a contiguous bfloat16 [300] tensor on cpu"});
}

}  // namespace
}  // namespace psync
