// The fused causal attention on the CPU against the materialized path
// (float32 within 1e-5, float64 within 1e-12, bfloat16 against float32 within
// 2e-2), its log-sum-exp against a direct sum, strided inputs, layouts,
// determinism and errors.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/tensor/attention_test_util.h"
#include "psync/tensor/ops.h"

namespace psync {
namespace {

using ::psync::testing::ExpectTensorError;
using ::psync::testing::MaterializedAttention;
using ::psync::testing::MaterializedAttentionBackward;
using ::psync::testing::Qkv;
using ::psync::testing::RandomQkv;
using ::psync::testing::RandomTensor;
using ::psync::testing::RelDiff;
using ::psync::testing::SameBits;

struct Shape4 {
  int64_t B, H, T, D;
  std::string Name() const {
    return "B=" + std::to_string(B) + " H=" + std::to_string(H) + " T=" + std::to_string(T) + " D=" + std::to_string(D);
  }
};

// T around the tile (64): one row, one partial tile, exactly one, one more,
// several with a ragged end; D small, odd and the GPT-2 head size.
const std::vector<Shape4> kShapes = {{1, 1, 1, 1},  {2, 3, 7, 5},   {1, 2, 64, 64}, {2, 1, 65, 8},
                                     {1, 2, 130, 16}, {1, 1, 200, 64}, {2, 2, 33, 3}};

TEST(AttentionCpu, ForwardAndBackwardMatchTheMaterializedPath) {
  for (const Shape4& s : kShapes) {
    for (bool projection : {false, true}) {
      for (DType dt : {kFloat32, kFloat64}) {
        const std::string what = s.Name() + (projection ? " qkv views " : " contiguous ") + DTypeName(dt);
        const Qkv x = testing::To(RandomQkv(s.B, s.H, s.T, s.D, 7, projection, Device::CPU(), -2.0f, 2.0f), dt);
        const Tensor g = RandomTensor({s.B, s.H, s.T, s.D}, 11).To(dt);
        const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
        const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
        ops::AttentionResult r = ops::CausalAttention(x.q, x.k, x.v, scale);
        ASSERT_EQ(r.out.shape(), (Shape{s.B, s.H, s.T, s.D})) << what;
        ASSERT_EQ(r.lse.shape(), (Shape{s.B, s.H, s.T})) << what;
        EXPECT_TRUE(r.out.Permute({0, 2, 1, 3}).is_contiguous()) << what << ": out is not [B, T, H, D] in memory";
        EXPECT_LE(RelDiff(r.out, MaterializedAttention(x, scale)), tol) << what;

        const ops::AttentionGrads ref = MaterializedAttentionBackward(x, g, scale);
        const ops::AttentionGrads got = ops::CausalAttentionBackward(g, x.q, x.k, x.v, r.out, r.lse, scale);
        EXPECT_LE(RelDiff(got.dq, ref.dq), tol * 4) << what << " dq";
        EXPECT_LE(RelDiff(got.dk, ref.dk), tol * 4) << what << " dk";
        EXPECT_LE(RelDiff(got.dv, ref.dv), tol * 4) << what << " dv";
        EXPECT_TRUE(got.dq.Permute({0, 2, 1, 3}).is_contiguous()) << what;
      }
    }
  }
}

TEST(AttentionCpu, LogSumExpIsTheRowsNormalizer) {
  const int64_t B = 1, H = 2, T = 100, D = 8;
  const Qkv x = testing::To(RandomQkv(B, H, T, D, 21, false), kFloat64);
  const double scale = 0.4;
  const std::vector<double> lse = ops::CausalAttention(x.q, x.k, x.v, scale).lse.ToVector<double>();
  const std::vector<double> q = x.q.ToVector<double>(), k = x.k.ToVector<double>();
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < T; ++i) {
      double sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q[((h * T) + i) * D + d] * k[((h * T) + j) * D + d];
        sum += std::exp(scale * dot);
      }
      ASSERT_NEAR(lse[static_cast<size_t>(h * T + i)], std::log(sum), 1e-12) << "h=" << h << " i=" << i;
    }
  }
}

TEST(AttentionCpu, LargeScoresStayFiniteAndAsAccurateAsTheMaterializedPath) {
  // Scores of several hundred: the online softmax rescales instead of
  // overflowing. At such scores float32 round-off in q.k (~3e-5 absolute)
  // is amplified by exp in either path, so both are measured against float64.
  const Qkv x = RandomQkv(1, 2, 150, 16, 31, true, Device::CPU(), -6.0f, 6.0f);
  const ops::AttentionResult r = ops::CausalAttention(x.q, x.k, x.v, 1.0);
  for (float v : r.out.Permute({0, 2, 1, 3}).Contiguous().ToVector()) ASSERT_TRUE(std::isfinite(v));
  const Qkv x64 = testing::To(x, kFloat64);
  const Tensor exact = ops::CausalAttention(x64.q, x64.k, x64.v, 1.0).out;
  const double fused = RelDiff(r.out, exact), materialized = RelDiff(MaterializedAttention(x, 1.0), exact);
  EXPECT_LE(fused, 2 * materialized + 1e-6) << "fused " << fused << ", materialized " << materialized;
}

TEST(AttentionCpu, BFloat16MatchesFloat32WithinBFloat16Precision) {
  for (const Shape4& s : {Shape4{2, 2, 70, 64}, Shape4{1, 3, 129, 32}, Shape4{1, 1, 5, 7}}) {
    // bf16 inputs; the float32 reference sees the same (rounded) values.
    const Qkv xb = testing::To(RandomQkv(s.B, s.H, s.T, s.D, 41, true), kBFloat16);
    const Qkv xf = testing::To(xb, kFloat32);
    const Tensor gb = RandomTensor({s.B, s.H, s.T, s.D}, 43).To(kBFloat16), gf = gb.To(kFloat32);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
    const ops::AttentionResult rb = ops::CausalAttention(xb.q, xb.k, xb.v, scale);
    const ops::AttentionResult rf = ops::CausalAttention(xf.q, xf.k, xf.v, scale);
    ASSERT_EQ(rb.out.dtype(), kBFloat16);
    ASSERT_EQ(rb.lse.dtype(), kFloat32);
    EXPECT_LE(RelDiff(rb.out, rf.out), 2e-2) << s.Name();
    EXPECT_LE(RelDiff(rb.lse, rf.lse), 1e-2) << s.Name();
    const ops::AttentionGrads gbf = ops::CausalAttentionBackward(gb, xb.q, xb.k, xb.v, rb.out, rb.lse, scale);
    const ops::AttentionGrads gff = ops::CausalAttentionBackward(gf, xf.q, xf.k, xf.v, rf.out, rf.lse, scale);
    EXPECT_LE(RelDiff(gbf.dq, gff.dq), 2e-2) << s.Name();
    EXPECT_LE(RelDiff(gbf.dk, gff.dk), 2e-2) << s.Name();
    EXPECT_LE(RelDiff(gbf.dv, gff.dv), 2e-2) << s.Name();
  }
}

TEST(AttentionCpu, StridedInputsAreReadInPlaceWithTheSameBits) {
  const Qkv x = RandomQkv(2, 3, 67, 16, 51, true);
  const Qkv c = {x.q.Contiguous(), x.k.Contiguous(), x.v.Contiguous(), Tensor()};
  const Tensor g = RandomTensor({2, 3, 67, 16}, 52);
  const ops::AttentionResult rx = ops::CausalAttention(x.q, x.k, x.v, 0.25);
  const ops::AttentionResult rc = ops::CausalAttention(c.q, c.k, c.v, 0.25);
  EXPECT_TRUE(SameBits(rx.out, rc.out));
  EXPECT_TRUE(SameBits(rx.lse, rc.lse));
  // A grad with a non-unit last stride (copied first) and a transposed-heads grad.
  const Tensor gt = g.Transpose(2, 3).Contiguous().Transpose(2, 3);
  ASSERT_NE(gt.stride(3), 1);
  const ops::AttentionGrads a = ops::CausalAttentionBackward(g, x.q, x.k, x.v, rx.out, rx.lse, 0.25);
  const ops::AttentionGrads b = ops::CausalAttentionBackward(gt, c.q, c.k, c.v, rc.out.Contiguous(), rc.lse, 0.25);
  EXPECT_TRUE(SameBits(a.dq, b.dq));
  EXPECT_TRUE(SameBits(a.dk, b.dk));
  EXPECT_TRUE(SameBits(a.dv, b.dv));
}

TEST(AttentionCpu, SameBitsEveryRun) {
  const Qkv x = RandomQkv(2, 2, 150, 32, 61, true);
  const Tensor g = RandomTensor({2, 2, 150, 32}, 62);
  const ops::AttentionResult r1 = ops::CausalAttention(x.q, x.k, x.v, 0.2), r2 = ops::CausalAttention(x.q, x.k, x.v, 0.2);
  EXPECT_TRUE(SameBits(r1.out, r2.out));
  EXPECT_TRUE(SameBits(r1.lse, r2.lse));
  const ops::AttentionGrads a = ops::CausalAttentionBackward(g, x.q, x.k, x.v, r1.out, r1.lse, 0.2);
  const ops::AttentionGrads b = ops::CausalAttentionBackward(g, x.q, x.k, x.v, r1.out, r1.lse, 0.2);
  EXPECT_TRUE(SameBits(a.dq, b.dq) && SameBits(a.dk, b.dk) && SameBits(a.dv, b.dv));
}

TEST(AttentionCpu, EmptyShapesAndErrors) {
  const Tensor z = Tensor::Zeros({0, 2, 4, 8});
  ops::AttentionResult r = ops::CausalAttention(z, z, z, 1.0);
  EXPECT_EQ(r.out.shape(), (Shape{0, 2, 4, 8}));
  EXPECT_EQ(r.lse.shape(), (Shape{0, 2, 4}));
  const Tensor a = Tensor::Zeros({1, 2, 4, 8}), b = Tensor::Zeros({1, 2, 5, 8});
  ExpectTensorError([&] { ops::CausalAttention(a, b, a, 1.0); },
                    {"CausalAttention(q [1, 2, 4, 8] float32 cpu, k [1, 2, 5, 8] float32 cpu, v [1, 2, 4, 8] float32 cpu)",
                     "k must have q's shape"});
  ExpectTensorError([&] { ops::CausalAttention(Tensor::Zeros({2, 4, 8}), Tensor::Zeros({2, 4, 8}), Tensor::Zeros({2, 4, 8}), 1.0); },
                    {"CausalAttention", "q must be [B, H, T, D]"});
  ExpectTensorError([&] { ops::CausalAttention(a, a, a.To(kFloat64), 1.0); }, {"CausalAttention", "dtypes differ"});
  ExpectTensorError([&] { ops::CausalAttention(a.To(kFloat16), a.To(kFloat16), a.To(kFloat16), 1.0); },
                    {"CausalAttention", "float16 is not supported"});
  ExpectTensorError([&] { ops::CausalAttention(a, a, a, INFINITY); }, {"CausalAttention", "scale must be finite"});
  const Tensor d0 = Tensor::Zeros({1, 1, 3, 0});
  ExpectTensorError([&] { ops::CausalAttention(d0, d0, d0, 1.0); }, {"CausalAttention", "head size D"});
  const ops::AttentionResult ra = ops::CausalAttention(a, a, a, 1.0);
  ExpectTensorError([&] { ops::CausalAttentionBackward(a, a, a, a, ra.out, ra.lse.To(kFloat64), 1.0); },
                    {"CausalAttentionBackward", "lse must be float32"});
  ExpectTensorError([&] { ops::CausalAttentionBackward(a, a, a, a, ra.out, Tensor::Zeros({1, 2, 5}), 1.0); },
                    {"CausalAttentionBackward", "lse must be [B, H, T]"});
}

}  // namespace
}  // namespace psync
