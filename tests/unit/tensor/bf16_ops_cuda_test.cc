// The bf16 step's ops and the cuBLASLt products on CUDA against the CPU:
// bfloat16 products (with bias, bias+GELU and GELU-backward epilogues),
// float32 products with the same epilogues, TF32, batched products whose
// batch dims do not collapse (one pointer-array call), the bfloat16 GPT
// layers and reductions, and the multi-tensor AdamW writing the bf16 copy
// (bitwise equal to the CPU's). Skips without a GPU; compiles everywhere.
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

using ::psync::testing::RandomLabels;
using ::psync::testing::RandomTensor;

class Bf16OpsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device: " << CheckDeviceAvailable(Device::CUDA(0)).message();
    }
  }
  void TearDown() override { ops::SetAllowTf32(false); }
  const Device gpu_ = Device::CUDA(0);

  Tensor G(const Tensor& t) const { return t.To(gpu_); }

  // max |cuda - cpu| <= rel * max |cpu| + abs (both converted to float32).
  static void ExpectClose(const Tensor& cuda, const Tensor& cpu, double rel, double abs, const std::string& what) {
    ASSERT_TRUE(cuda.device().is_cuda()) << what;
    ASSERT_EQ(cuda.dtype(), cpu.dtype()) << what;
    ASSERT_EQ(cuda.shape(), cpu.shape()) << what;
    const Tensor c = cuda.To(Device::CPU()).To(kFloat32), h = cpu.To(kFloat32);
    double scale = 0;
    for (float v : h.ToVector()) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    EXPECT_LE(ops::MaxAbsDiff(c, h), rel * scale + abs) << what;
  }
  static void ExpectSameBits(const Tensor& cuda, const Tensor& cpu, const std::string& what) {
    ASSERT_EQ(cuda.dtype(), cpu.dtype()) << what;
    EXPECT_EQ(cuda.To(Device::CPU()).To(kFloat32).ToVector(), cpu.To(kFloat32).ToVector()) << what;
  }
};

constexpr double kBf16Rel = 1.0 / 128;  // two bf16 roundings apart at most, relative to the largest value

TEST_F(Bf16OpsCuda, Bf16MatmulAllTransposesAndFloat32Destinations) {
  for (auto [m, k, n] : {std::tuple{67, 129, 33}, {256, 128, 384}, {1, 8, 1}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const std::string what = absl::StrCat(m, "x", k, "x", n, " ta=", ta, " tb=", tb);
        Tensor a = RandomTensor(ta ? Shape{k, m} : Shape{m, k}, 1).To(kBFloat16);
        Tensor b = RandomTensor(tb ? Shape{n, k} : Shape{k, n}, 2).To(kBFloat16);
        ExpectClose(ops::Matmul(G(a), G(b), ta, tb), ops::Matmul(a, b, ta, tb), kBf16Rel, 1e-6, what);
        ExpectClose(ops::MatmulInto(Tensor::Empty({m, n}, kFloat32, gpu_), G(a), G(b), ta, tb),
                    ops::MatmulInto(Tensor::Empty({m, n}, kFloat32), a, b, ta, tb), 1e-5, 1e-6, what + " into float32");
      }
    }
  }
}

TEST_F(Bf16OpsCuda, EpiloguesMatchTheCpuInBothDtypes) {
  const int64_t N = 96, in = 64, out = 128;  // out % 8 == 0: the fused GELU epilogues apply
  Tensor x = RandomTensor({N, in}, 11), w = RandomTensor({out, in}, 12), bias = RandomTensor({out}, 13);
  Tensor g = RandomTensor({N, in}, 14), w2 = RandomTensor({in, out}, 15);
  for (DType dt : {kFloat32, kBFloat16}) {
    const std::string d = DTypeName(dt);
    const double rel = dt == kFloat32 ? 1e-5 : kBf16Rel;
    const Tensor xd = x.To(dt), wd = w.To(dt), gd = g.To(dt), w2d = w2.To(dt);
    ExpectClose(ops::Linear(G(xd), G(wd), G(bias)), ops::Linear(xd, wd, bias), rel, 1e-6, d + " Linear");
    ops::LinearGeluResult c = ops::LinearGelu(G(xd), G(wd), G(bias));
    ops::LinearGeluResult h = ops::LinearGelu(xd, wd, bias);
    ExpectClose(c.pre, h.pre, rel, 1e-6, d + " LinearGelu pre");
    ExpectClose(c.y, h.y, rel, 1e-5, d + " LinearGelu y");
    ExpectClose(ops::MatmulGeluBackward(G(gd), G(w2d), h.pre.To(gpu_)), ops::MatmulGeluBackward(gd, w2d, h.pre), rel,
                1e-5, d + " MatmulGeluBackward");
  }
}

TEST_F(Bf16OpsCuda, Tf32IsOffByDefaultAndOnWhenAsked) {
  Tensor a = RandomTensor({64, 1024}, 21), b = RandomTensor({1024, 64}, 22);
  const Tensor want = ops::Matmul(a, b);
  ExpectClose(ops::Matmul(G(a), G(b)), want, 1e-5, 1e-5, "fp32");
  ops::SetAllowTf32(true);
  // TF32 keeps 10 mantissa bits of each input: ~1e-3 relative per product.
  ExpectClose(ops::Matmul(G(a), G(b)), want, 5e-3, 1e-3, "tf32");
  ops::SetAllowTf32(false);
  ExpectClose(ops::Matmul(G(a), G(b)), want, 1e-5, 1e-5, "fp32 again");
}

TEST_F(Bf16OpsCuda, BatchedProductsOfHeadViewsTakeOneCall) {
  // [B, H, T, hs] heads of a [B, T, 3C] projection: batch dims that do not
  // collapse (pointer arrays on the device), k transposed.
  const int64_t B = 3, T = 32, H = 4, hs = 16, C = H * hs;
  Tensor qkv = RandomTensor({B, T, 3 * C}, 31);
  auto heads = [&](const Tensor& t, int64_t i) { return t.Narrow(2, i * C, C).Reshape({B, T, H, hs}).Permute({0, 2, 1, 3}); };
  for (DType dt : {kFloat32, kBFloat16}) {
    const Tensor h = qkv.To(dt), d = G(h);
    const double rel = dt == kFloat32 ? 1e-5 : kBf16Rel;
    ExpectClose(ops::BatchedMatmul(heads(d, 0), heads(d, 1).Transpose(-2, -1)),
                ops::BatchedMatmul(heads(h, 0), heads(h, 1).Transpose(-2, -1)), rel, 1e-6,
                std::string(DTypeName(dt)) + " q k^T");
    Tensor att = RandomTensor({B, H, T, T}, 32, Device::CPU(), 0.0f, 1.0f).To(dt);
    ExpectClose(ops::BatchedMatmul(G(att), heads(d, 2)), ops::BatchedMatmul(att, heads(h, 2)), rel, 1e-6,
                std::string(DTypeName(dt)) + " att v");
  }
}

TEST_F(Bf16OpsCuda, GptLayersInBf16MatchTheCpu) {
  const int64_t rows = 70, C = 96;
  Tensor x = RandomTensor({rows, C}, 41, Device::CPU(), -2.0f, 2.0f);
  Tensor a = RandomTensor({rows, C}, 42).To(kBFloat16);
  Tensor w = RandomTensor({C}, 43, Device::CPU(), 0.5f, 1.5f), b = RandomTensor({C}, 44);
  ops::ResidualLayerNormResult c = ops::ResidualLayerNorm(G(x), G(a), G(w), G(b), 1e-5, kBFloat16);
  ops::ResidualLayerNormResult h = ops::ResidualLayerNorm(x, a, w, b, 1e-5, kBFloat16);
  ExpectSameBits(c.h, h.h, "ResidualLayerNorm h");  // one float add each
  ExpectClose(c.y, h.y, kBf16Rel, 1e-6, "ResidualLayerNorm y");
  ExpectClose(ops::LayerNorm(G(x), G(w), G(b), 1e-5, kBFloat16).y, ops::LayerNorm(x, w, b, 1e-5, kBFloat16).y, kBf16Rel,
              1e-6, "LayerNorm -> bf16");
  Tensor g = RandomTensor({rows, C}, 45).To(kBFloat16), rg = RandomTensor({rows, C}, 46);
  ops::LayerNormGrads cg = ops::LayerNormBackward(G(g), c.h, G(w), c.mean, c.rstd, Tensor(), Tensor(), G(rg));
  ops::LayerNormGrads hg = ops::LayerNormBackward(g, h.h, w, h.mean, h.rstd, Tensor(), Tensor(), rg);
  ExpectClose(cg.dx, hg.dx, 1e-5, 1e-6, "LayerNormBackward dx (bf16 grad, residual grad)");
  ExpectClose(cg.dweight, hg.dweight, 1e-5, 1e-6, "dweight");
  ExpectClose(cg.dbias, hg.dbias, 1e-5, 1e-6, "dbias");
  Tensor v = RandomTensor({4000}, 47, Device::CPU(), -6.0f, 6.0f).To(kBFloat16);
  ExpectClose(ops::Gelu(G(v)), ops::Gelu(v), kBf16Rel, 1e-6, "Gelu");
  Tensor gv = RandomTensor({4000}, 48).To(kBFloat16);
  ExpectClose(ops::GeluBackward(G(gv), G(v)), ops::GeluBackward(gv, v), kBf16Rel, 1e-6, "GeluBackward");
  Tensor s = RandomTensor({2, 3, 40, 40}, 49, Device::CPU(), -4.0f, 4.0f).To(kBFloat16);
  Tensor ps = ops::CausalSoftmax(s, 0.25);
  ExpectClose(ops::CausalSoftmax(G(s), 0.25), ps, kBf16Rel, 1e-6, "CausalSoftmax");
  Tensor gs = RandomTensor({2, 3, 40, 40}, 50).To(kBFloat16);
  ExpectClose(ops::CausalSoftmaxBackward(G(gs), G(ps), 0.25), ops::CausalSoftmaxBackward(gs, ps, 0.25), kBf16Rel, 1e-6,
              "CausalSoftmaxBackward");
  for (int64_t classes : {300, 5000}) {  // narrow rows and the warp-per-row kernels
    Tensor logits = RandomTensor({33, classes}, 51, Device::CPU(), -5.0f, 5.0f).To(kBFloat16);
    Tensor t = RandomLabels(33, classes, 52);
    ExpectClose(ops::CrossEntropy(G(logits), G(t)), ops::CrossEntropy(logits, t), 1e-6, 1e-6, "CrossEntropy");
    Tensor one = Tensor::Scalar(1.0f);
    ExpectClose(ops::CrossEntropyBackward(G(one), G(logits), G(t)), ops::CrossEntropyBackward(one, logits, t), kBf16Rel,
                1e-7, "CrossEntropyBackward");
  }
  Tensor r = RandomTensor({300, 64}, 53).To(kBFloat16);
  ExpectSameBits(ops::SumRows(G(r)), ops::SumRows(r), "SumRows of bf16 (float32, the fixed order)");
  EXPECT_EQ(ops::SumOfSquares(G(r)).Item<double>(), ops::SumOfSquares(r).Item<double>());
  Tensor y = RandomTensor({300, 64}, 54).To(kBFloat16);
  ExpectSameBits(ops::Add(G(r), G(y)), ops::Add(r, y), "Add bf16");
  ExpectSameBits(ops::Mul(G(r), G(y)), ops::Mul(r, y), "Mul bf16");
}

TEST_F(Bf16OpsCuda, MultiTensorAdamWWithCopiesEqualsTheCpuBitwise) {
  // More parameters than one launch's table holds.
  const int count = 300;
  std::vector<ops::AdamWParam> host, dev;
  for (int i = 0; i < count; ++i) {
    const Shape shape = {1 + (i * 37) % 500};
    ops::AdamWParam p;
    p.p = RandomTensor(shape, 100 + i);
    p.g = RandomTensor(shape, 1000 + i);
    p.m = RandomTensor(shape, 2000 + i, Device::CPU(), 0.0f, 0.1f);
    p.v = RandomTensor(shape, 3000 + i, Device::CPU(), 0.0f, 0.01f);
    p.p_copy = i % 3 == 0 ? Tensor() : Tensor::Empty(shape, kBFloat16);
    p.step.lr = 1e-3;
    p.step.beta2 = 0.95;
    p.step.weight_decay = i % 2 ? 0.1 : 0.0;
    p.step.step = 1 + i % 7;
    ops::AdamWParam d = p;
    d.p = p.p.To(gpu_);
    d.g = p.g.To(gpu_);
    d.m = p.m.To(gpu_);
    d.v = p.v.To(gpu_);
    d.p_copy = p.p_copy.defined() ? Tensor::Empty(shape, kBFloat16, gpu_) : Tensor();
    host.push_back(p);
    dev.push_back(d);
  }
  ops::AdamWUpdateMany(host);
  ops::AdamWUpdateMany(dev);
  for (int i = 0; i < count; ++i) {
    const std::string what = "parameter " + std::to_string(i);
    ExpectSameBits(dev[i].p, host[i].p, what + " p");
    ExpectSameBits(dev[i].m, host[i].m, what + " m");
    ExpectSameBits(dev[i].v, host[i].v, what + " v");
    if (host[i].p_copy.defined()) ExpectSameBits(dev[i].p_copy, host[i].p_copy, what + " copy");
  }
}

}  // namespace
}  // namespace psync
