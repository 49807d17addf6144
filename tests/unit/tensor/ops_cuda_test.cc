// Every op on CUDA against the same op on CPU. Skips without a GPU (the
// build machine has none); it must still compile and link everywhere.
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/tensor/test_util.h"
#include "worker/tensor/cuda/cuda_device.h"
#include "psync/tensor/ops.h"

#ifdef PSYNC_WITH_CUDA
#include "worker/tensor/cuda/cuda_context.h"
#endif

namespace psync {
namespace {

using ::psync::testing::ExpectTensorError;
using ::psync::testing::RandomLabels;
using ::psync::testing::RandomTensor;

class OpsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device: " << CheckDeviceAvailable(Device::CUDA(0)).message();
    }
  }
  const Device gpu_ = Device::CUDA(0);

  // CUDA result vs CPU result: max |diff| <= tol * (1 + max |cpu|).
  static void ExpectClose(const Tensor& cuda, const Tensor& cpu, float tol, const std::string& what) {
    ASSERT_TRUE(cuda.device().is_cuda()) << what;
    ASSERT_TRUE(cpu.device().is_cpu()) << what;
    ASSERT_EQ(cuda.shape(), cpu.shape()) << what;
    float scale = 0.0f;
    for (float v : cpu.ToVector()) scale = std::max(scale, std::fabs(v));
    EXPECT_LE(ops::MaxAbsDiff(cuda, cpu), tol * (1.0f + scale)) << what;
  }
};

TEST_F(OpsCuda, TransfersAndViews) {
  Tensor h = RandomTensor({5, 7}, 1);
  Tensor d = h.To(gpu_);
  EXPECT_EQ(d.device(), gpu_);
  EXPECT_EQ(d.shape(), h.shape());
  EXPECT_TRUE(d.To(gpu_).IsSameView(d));
  EXPECT_EQ(d.ToVector(), h.ToVector());
  EXPECT_EQ(d.To(Device::CPU()).ToVector(), h.ToVector());
  Tensor c = d.Clone();
  EXPECT_FALSE(c.SharesStorageWith(d));
  EXPECT_EQ(c.ToVector(), h.ToVector());
  EXPECT_EQ(Tensor::FromVector({1, 2, 3}, {3}, gpu_).ToVector(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Tensor::Full({4}, 2.0f, gpu_).ToVector(), std::vector<float>(4, 2.0f));
  EXPECT_EQ(Tensor::Zeros({2, 2}, gpu_).ToVector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(Tensor::Scalar(3.0f, gpu_).Item(), 3.0f);
  EXPECT_TRUE(Tensor::Empty({0}, gpu_).defined());

  // Views share device storage; writes through a view reach the base.
  Tensor flat = Tensor::Zeros({8}, gpu_);
  Tensor v = flat.View(2, {2, 2});
  EXPECT_TRUE(v.SharesStorageWith(flat));
  ops::Copy(v, Tensor::FromVector({1, 2, 3, 4}, {4}));  // host -> device view
  EXPECT_EQ(flat.ToVector(), (std::vector<float>{0, 0, 1, 2, 3, 4, 0, 0}));
  Tensor back = Tensor::Zeros({4});
  ops::Copy(back, v);  // device view -> host
  EXPECT_EQ(back.ToVector(), (std::vector<float>{1, 2, 3, 4}));
  Tensor d2 = Tensor::Zeros({4}, gpu_);
  ops::Copy(d2, v);  // device -> device
  EXPECT_EQ(d2.ToVector(), (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(OpsCuda, MatmulAllTransposes) {
  const int64_t m = 67, k = 129, n = 33;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      Tensor a = RandomTensor(ta ? Shape{k, m} : Shape{m, k}, 10 + ta);
      Tensor b = RandomTensor(tb ? Shape{n, k} : Shape{k, n}, 20 + tb);
      ExpectClose(ops::Matmul(a.To(gpu_), b.To(gpu_), ta, tb), ops::Matmul(a, b, ta, tb), 1e-5f,
                  "matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
  }
  Tensor z = ops::Matmul(Tensor::Zeros({3, 0}, gpu_), Tensor::Zeros({0, 2}, gpu_));
  EXPECT_EQ(z.ToVector(), std::vector<float>(6, 0.0f));
}

TEST_F(OpsCuda, StridedViewsCastsAndBatchedMatmul) {
  // Strided copies (Contiguous of a permuted view) and conversions are
  // bitwise equal to the CPU's.
  Tensor x = RandomTensor({3, 4, 5}, 40);
  Tensor dx = x.To(gpu_);
  EXPECT_EQ(dx.Permute({2, 0, 1}).Contiguous().ToVector(), x.Permute({2, 0, 1}).Contiguous().ToVector());
  EXPECT_EQ(dx.Narrow(2, 1, 3).ToVector(), x.Narrow(2, 1, 3).ToVector());
  for (DType dt : {kBFloat16, kFloat16, kInt64}) {
    EXPECT_EQ(dx.To(dt).To(kFloat32).ToVector(), x.To(dt).To(kFloat32).ToVector()) << DTypeName(dt);
  }
  EXPECT_EQ(dx.To(kFloat64).ToVector<double>(), x.To(kFloat64).ToVector<double>());
  Tensor strided_dst = Tensor::Zeros({5, 6}, gpu_);
  ops::Copy(strided_dst.Narrow(1, 1, 4), x.Narrow(0, 0, 1).Reshape({4, 5}).Transpose(0, 1));  // host -> strided device
  Tensor cpu_dst = Tensor::Zeros({5, 6});
  ops::Copy(cpu_dst.Narrow(1, 1, 4), x.Narrow(0, 0, 1).Reshape({4, 5}).Transpose(0, 1));
  EXPECT_EQ(strided_dst.ToVector(), cpu_dst.ToVector());
  // Batched products: collapsible batch dims (strided-batched cuBLAS) and
  // the attention layout (made contiguous first).
  Tensor a = RandomTensor({4, 6, 8}, 41), b = RandomTensor({4, 8, 5}, 42);
  ExpectClose(ops::BatchedMatmul(a.To(gpu_), b.To(gpu_)), ops::BatchedMatmul(a, b), 1e-5f, "bmm");
  ExpectClose(ops::BatchedMatmul(a.To(gpu_), a.To(gpu_).Transpose(-2, -1)), ops::BatchedMatmul(a, a, false, true),
              1e-5f, "bmm a a^T");
  Tensor qkv = RandomTensor({2, 5, 36}, 43);
  auto heads = [](const Tensor& t, int64_t part) { return t.Narrow(2, part * 12, 12).Reshape({2, 5, 3, 4}).Permute({0, 2, 1, 3}); };
  Tensor dqkv = qkv.To(gpu_);
  ExpectClose(ops::BatchedMatmul(heads(dqkv, 0), heads(dqkv, 1).Transpose(-2, -1)),
              ops::BatchedMatmul(heads(qkv, 0), heads(qkv, 1).Transpose(-2, -1)), 1e-5f, "attention scores");
}

TEST_F(OpsCuda, ElementwiseAndBias) {
  Tensor a = RandomTensor({37, 19}, 30), b = RandomTensor({37, 19}, 31), bias = RandomTensor({19}, 32);
  Tensor da = a.To(gpu_), db = b.To(gpu_), dbias = bias.To(gpu_);
  // Elementwise ops round once per element: bitwise equal to CPU.
  EXPECT_EQ(ops::Add(da, db).ToVector(), ops::Add(a, b).ToVector());
  EXPECT_EQ(ops::Sub(da, db).ToVector(), ops::Sub(a, b).ToVector());
  EXPECT_EQ(ops::Mul(da, db).ToVector(), ops::Mul(a, b).ToVector());
  EXPECT_EQ(ops::Scale(da, 1.7f).ToVector(), ops::Scale(a, 1.7f).ToVector());
  EXPECT_EQ(ops::Relu(da).ToVector(), ops::Relu(a).ToVector());
  EXPECT_EQ(ops::ReluBackward(db, ops::Relu(da)).ToVector(), ops::ReluBackward(b, ops::Relu(a)).ToVector());
  EXPECT_EQ(ops::AddBias(da, dbias).ToVector(), ops::AddBias(a, bias).ToVector());
}

TEST_F(OpsCuda, Reductions) {
  Tensor x = RandomTensor({513, 21}, 40, Device::CPU(), -2.0f, 3.0f);
  Tensor dx = x.To(gpu_);
  // SumRows sums in the order reduce_kernels.h fixes for every device.
  EXPECT_EQ(ops::SumRows(dx).ToVector(), ops::SumRows(x).ToVector());
  // A GPT-2 bias gradient's shape: many chunks, columns over several blocks.
  Tensor wide = RandomTensor({8192 + 7, 768}, 42);
  EXPECT_EQ(ops::SumRows(wide.To(gpu_)).ToVector(), ops::SumRows(wide).ToVector());
  EXPECT_EQ(ops::SumRows(Tensor::Zeros({0, 3}, gpu_)).ToVector(), std::vector<float>(3, 0.0f));
  Tensor ds = ops::Sum(dx), dm = ops::Mean(dx);
  EXPECT_EQ(ds.device(), gpu_);
  EXPECT_EQ(ds.dim(), 0);
  ExpectClose(ds, ops::Sum(x), 1e-6f, "sum");
  ExpectClose(dm, ops::Mean(x), 1e-6f, "mean");
  EXPECT_EQ(ops::Sum(Tensor::Zeros({0}, gpu_)).Item(), 0.0f);
  Tensor big = RandomTensor({1 << 20}, 41);
  ExpectClose(ops::Sum(big.To(gpu_)), ops::Sum(big), 1e-6f, "sum 1M");
}

TEST_F(OpsCuda, SoftmaxAndCrossEntropy) {
  const int64_t rows = 129, cols = 10;
  Tensor logits = RandomTensor({rows, cols}, 50, Device::CPU(), -6.0f, 6.0f);
  Tensor labels = RandomLabels(rows, cols, 51);
  Tensor dl = logits.To(gpu_), dlab = labels.To(gpu_);
  ExpectClose(ops::LogSoftmax(dl), ops::LogSoftmax(logits), 1e-6f, "log_softmax");
  ExpectClose(ops::CrossEntropy(dl, dlab), ops::CrossEntropy(logits, labels), 1e-6f, "ce");
  // grad on the GPU (the normal case) and on the CPU (allowed).
  Tensor g = Tensor::Scalar(0.5f);
  ExpectClose(ops::CrossEntropyBackward(g.To(gpu_), dl, dlab),
              ops::CrossEntropyBackward(g, logits, labels), 1e-6f, "ce backward");
  ExpectClose(ops::CrossEntropyBackward(g, dl, dlab), ops::CrossEntropyBackward(g, logits, labels),
              1e-6f, "ce backward, host grad");
  // A bad label cannot throw on the device: the loss becomes NaN.
  Tensor bad = Tensor::FromVector(std::vector<int64_t>(rows, cols), {rows}, gpu_);  // class 10 of 10
  EXPECT_TRUE(std::isnan(ops::CrossEntropy(dl, bad).Item()));
}

// Rows of a GPT's vocabulary take the warp-per-row kernels: equal to the CPU
// to double round-off, then rounded to float.
TEST_F(OpsCuda, WideCrossEntropyMatchesCpu) {
  const int64_t rows = 37, cols = 5003;
  Tensor logits = RandomTensor({rows, cols}, 52, Device::CPU(), -8.0f, 8.0f);
  Tensor labels = RandomLabels(rows, cols, 53);
  Tensor dl = logits.To(gpu_), dlab = labels.To(gpu_);
  ExpectClose(ops::CrossEntropy(dl, dlab), ops::CrossEntropy(logits, labels), 1e-6f, "wide ce");
  Tensor g = Tensor::Scalar(0.5f);
  ExpectClose(ops::CrossEntropyBackward(g.To(gpu_), dl, dlab), ops::CrossEntropyBackward(g, logits, labels), 1e-6f,
              "wide ce backward");
  // The same bits on a second run (no atomics).
  EXPECT_EQ(ops::CrossEntropyBackward(g.To(gpu_), dl, dlab).ToVector(),
            ops::CrossEntropyBackward(g.To(gpu_), dl, dlab).ToVector());
  Tensor bad = Tensor::FromVector(std::vector<int64_t>(rows, -1), {rows}, gpu_);
  EXPECT_TRUE(std::isnan(ops::CrossEntropy(dl, bad).Item()));
  EXPECT_TRUE(std::isnan(ops::CrossEntropyBackward(g.To(gpu_), dl, bad).ToVector().front()));
}

// The fused classifier (loss + gradient written over the logits): on wide
// rows the same bits as CUDA's CrossEntropy + CrossEntropyBackward, the CPU's
// to round-off; padded rows (a strided view) keep their pad; bfloat16 rows
// within bf16 precision; the rescale kernel; bad targets give NaN.
TEST_F(OpsCuda, FusedClassifierMatchesCrossEntropyAndTheCpu) {
  const int64_t rows = 37, V = 5003, Vp = 5120;
  Tensor padded = RandomTensor({rows, Vp}, 54, Device::CPU(), -8.0f, 8.0f).To(gpu_);
  const Tensor before = padded.Clone();
  const Tensor view = padded.Narrow(1, 0, V);
  const Tensor logits = view.Contiguous();
  Tensor labels = RandomLabels(rows, V, 55, gpu_);
  const Tensor want_loss = ops::CrossEntropy(logits, labels);
  const Tensor want_grad = ops::CrossEntropyBackward(Tensor::Scalar(0.5f, gpu_), logits, labels);
  const Tensor loss = ops::FusedClassifier(view, labels, 0.5f);
  EXPECT_EQ(loss.Item(), want_loss.Item());
  EXPECT_EQ(view.Contiguous().ToVector(), want_grad.ToVector());
  EXPECT_EQ(padded.Narrow(1, V, Vp - V).Contiguous().ToVector(), before.Narrow(1, V, Vp - V).Contiguous().ToVector());
  const Tensor cpu_logits = logits.To(Device::CPU());
  Tensor cpu_x = cpu_logits.Clone();
  const Tensor cpu_loss = ops::FusedClassifier(cpu_x, labels.To(Device::CPU()), 0.5f);
  ExpectClose(loss, cpu_loss, 1e-6f, "fused loss vs cpu");
  ExpectClose(view.Contiguous(), cpu_x, 1e-6f, "fused grad vs cpu");
  // Rescale: the same gradient is left alone; another one scales it.
  const std::vector<float> written = view.Contiguous().ToVector();
  ops::RescaleClassifierGrad(view, Tensor::Scalar(0.5f, gpu_), 0.5f);
  EXPECT_EQ(view.Contiguous().ToVector(), written);
  ops::RescaleClassifierGrad(view, Tensor::Scalar(1.0f, gpu_), 0.5f);
  ExpectClose(view.Contiguous(), ops::CrossEntropyBackward(Tensor::Scalar(1.0f), cpu_logits, labels.To(Device::CPU())),
              1e-6f, "rescaled");
  // bfloat16 rows, and narrow rows.
  for (int64_t cols : {int64_t{10}, int64_t{3000}}) {
    const Tensor lb = RandomTensor({9, cols}, 56, gpu_, -4.0f, 4.0f).To(kBFloat16);
    const Tensor lab = RandomLabels(9, cols, 57, gpu_);
    Tensor xb = lb.Clone();
    const Tensor lossb = ops::FusedClassifier(xb, lab, 1.0f);
    EXPECT_NEAR(lossb.Item(), ops::CrossEntropy(lb.To(kFloat32), lab).Item(), 1e-5);
    Tensor xc = lb.To(Device::CPU());
    ops::FusedClassifier(xc, lab.To(Device::CPU()), 1.0f);
    EXPECT_LE(ops::MaxAbsDiff(xb.To(kFloat32), xc.To(kFloat32).To(gpu_)), 1e-2 / static_cast<double>(9)) << cols;
  }
  Tensor bad_x = logits.Clone();
  const Tensor bad = Tensor::FromVector(std::vector<int64_t>(rows, -1), {rows}, gpu_);
  EXPECT_TRUE(std::isnan(ops::FusedClassifier(bad_x, bad, 1.0f).Item()));
  EXPECT_TRUE(std::isnan(bad_x.ToVector().front()));
}

// The GPT's layers. Copies and the embedding's scatter-add (the same double
// sums in the same position order) are bitwise equal to the CPU; so are
// LayerNorm's weight/bias gradients for the same inputs. Row-wise sums use a
// warp tree on CUDA: equal to double round-off, then rounded to float.
TEST_F(OpsCuda, EmbeddingMatchesCpuBitwise) {
  const int64_t V = 300, C = 72;
  std::vector<int64_t> idv;
  for (int64_t i = 0; i < 16 * 64; ++i) idv.push_back((i * 37 + i / 5) % 11 == 0 ? 7 : (i * 131) % V);  // id 7 very often
  const Tensor ids = Tensor::FromVector(idv, {16, 64}), w = RandomTensor({V, C}, 90), g = RandomTensor({16, 64, C}, 91);
  const Tensor dids = ids.To(gpu_), dw = w.To(gpu_), dg = g.To(gpu_);
  EXPECT_EQ(ops::Embedding(dids, dw).ToVector(), ops::Embedding(ids, w).ToVector());
  const std::vector<float> cpu = ops::EmbeddingBackward(g, ids, V).ToVector();
  EXPECT_EQ(ops::EmbeddingBackward(dg, dids, V).ToVector(), cpu);
  EXPECT_EQ(ops::EmbeddingBackward(dg, dids, V).ToVector(), cpu);  // and the same on a second run
  // Into a destination view; a GPT-2-sized table with few ids.
  Tensor flat = Tensor::Full({V * C + 5}, 3.0f, gpu_);
  Tensor slot = flat.View(5, {V, C});
  EXPECT_TRUE(ops::EmbeddingBackwardInto(slot, dg, dids, V).IsSameView(slot));
  EXPECT_EQ(slot.ToVector(), cpu);
  EXPECT_EQ(flat.View(0, {5}).ToVector(), std::vector<float>(5, 3.0f));
  const Tensor few = Tensor::FromVector(std::vector<int64_t>{50256, 3, 50256}, {3});
  const Tensor gf = RandomTensor({3, 8}, 92);
  EXPECT_EQ(ops::EmbeddingBackward(gf.To(gpu_), few.To(gpu_), 50257).ToVector(),
            ops::EmbeddingBackward(gf, few, 50257).ToVector());
  // An id out of range cannot throw in a kernel: its row is NaN, and the
  // backward skips it.
  const Tensor bad = Tensor::FromVector(std::vector<int64_t>{1, V, -1}, {3}, gpu_);
  const std::vector<float> y = ops::Embedding(bad, dw).ToVector();
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + C), w.Narrow(0, 1, 1).Flatten().ToVector());
  EXPECT_TRUE(std::isnan(y[C]) && std::isnan(y[2 * C]));
  const std::vector<float> db = ops::EmbeddingBackward(Tensor::Full({3, C}, 1.0f, gpu_), bad, V).ToVector();
  float total = 0.0f;
  for (float v : db) total += v;
  EXPECT_EQ(total, static_cast<float>(C));  // only id 1's row
}

TEST_F(OpsCuda, LayerNormMatchesCpu) {
  for (const Shape& shape : {Shape{16, 64, 128}, Shape{5, 33}, Shape{1, 1}, Shape{70, 1000}}) {
    const int64_t c = shape.back();
    const Tensor x = RandomTensor(shape, 93, Device::CPU(), 1.0f, 3.0f), w = RandomTensor({c}, 94);
    const Tensor b = RandomTensor({c}, 95), g = RandomTensor(shape, 96);
    const std::string what = ShapeToString(shape);
    ops::LayerNormResult cpu = ops::LayerNorm(x, w, b, 1e-5);
    ops::LayerNormResult gpu = ops::LayerNorm(x.To(gpu_), w.To(gpu_), b.To(gpu_), 1e-5);
    ExpectClose(gpu.y, cpu.y, 1e-6f, what + " y");
    ExpectClose(gpu.mean, cpu.mean, 1e-6f, what + " mean");
    ExpectClose(gpu.rstd, cpu.rstd, 1e-6f, what + " rstd");
    // Backward from the same saved mean/rstd on both devices.
    ops::LayerNormGrads dc = ops::LayerNormBackward(g, x, w, cpu.mean, cpu.rstd);
    ops::LayerNormGrads dg = ops::LayerNormBackward(g.To(gpu_), x.To(gpu_), w.To(gpu_), cpu.mean.To(gpu_),
                                                    cpu.rstd.To(gpu_));
    ExpectClose(dg.dx, dc.dx, 1e-5f, what + " dx");
    EXPECT_EQ(dg.dweight.ToVector(), dc.dweight.ToVector()) << what;
    EXPECT_EQ(dg.dbias.ToVector(), dc.dbias.ToVector()) << what;
  }
}

TEST_F(OpsCuda, GeluAndCausalSoftmaxMatchCpu) {
  const Tensor h = RandomTensor({16, 64, 512}, 97, Device::CPU(), -6.0f, 6.0f), gh = RandomTensor({16, 64, 512}, 98);
  ExpectClose(ops::Gelu(h.To(gpu_)), ops::Gelu(h), 1e-6f, "gelu");
  ExpectClose(ops::GeluBackward(gh.To(gpu_), h.To(gpu_)), ops::GeluBackward(gh, h), 1e-6f, "gelu backward");
  for (const Shape& shape : {Shape{16, 4, 64, 64}, Shape{1, 1}, Shape{3, 37, 37}, Shape{2, 300, 300}}) {
    const Tensor s = RandomTensor(shape, 99, Device::CPU(), -5.0f, 5.0f), g = RandomTensor(shape, 100);
    const std::string what = ShapeToString(shape);
    const Tensor pc = ops::CausalSoftmax(s, 0.125), pg = ops::CausalSoftmax(s.To(gpu_), 0.125);
    ExpectClose(pg, pc, 1e-6f, what + " softmax");
    // The masked half is exactly 0 on both.
    std::vector<float> pv = pg.ToVector();
    const int64_t t = shape.back();
    for (int64_t r = 0; r < pc.numel() / t; ++r) {
      for (int64_t j = r % t + 1; j < t; ++j) ASSERT_EQ(pv[r * t + j], 0.0f) << what;
    }
    ExpectClose(ops::CausalSoftmaxBackward(g.To(gpu_), pc.To(gpu_), 0.125), ops::CausalSoftmaxBackward(g, pc, 0.125),
                1e-6f, what + " softmax backward");
  }
}

TEST_F(OpsCuda, GptLayersAreDeterministic) {
  const Tensor x = RandomTensor({8, 64, 256}, 101, gpu_), w = RandomTensor({256}, 102, gpu_), b = RandomTensor({256}, 103, gpu_);
  const Tensor s = RandomTensor({8, 4, 64, 64}, 104, gpu_);
  auto run = [&] {
    ops::LayerNormResult r = ops::LayerNorm(x, w, b, 1e-5);
    ops::LayerNormGrads d = ops::LayerNormBackward(x, x, w, r.mean, r.rstd);
    const Tensor p = ops::CausalSoftmax(s, 0.2);
    std::vector<std::vector<float>> out;
    for (const Tensor& t : {r.y, r.rstd, d.dx, d.dweight, d.dbias, ops::Gelu(x), ops::GeluBackward(x, x), p,
                            ops::CausalSoftmaxBackward(s, p, 0.2)}) {
      out.push_back(t.ToVector());
    }
    return out;
  };
  EXPECT_TRUE(run() == run());
}

TEST_F(OpsCuda, Conv2dMatchesCpu) {
  struct C {
    Shape x, w;
    int64_t stride, padding;
  };
  // The CNN's two layers; stride 2 with a non-square kernel; 1x1 (no
  // im2col); a batch of 300 28x28x16 images, more than one 64 MiB chunk of
  // column matrices.
  for (const C& c : {C{{64, 1, 28, 28}, {16, 1, 3, 3}, 1, 1}, C{{64, 16, 14, 14}, {32, 16, 3, 3}, 1, 1},
                     C{{3, 5, 11, 9}, {7, 5, 3, 2}, 2, 0}, C{{4, 8, 6, 6}, {3, 8, 1, 1}, 1, 0},
                     C{{300, 16, 28, 28}, {8, 16, 3, 3}, 1, 1}}) {
    const std::string what = ShapeToString(c.x) + " * " + ShapeToString(c.w);
    const Tensor x = RandomTensor(c.x, 110), w = RandomTensor(c.w, 111), b = RandomTensor({c.w[0]}, 112);
    const Tensor y = ops::Conv2d(x, w, b, c.stride, c.padding);
    const Tensor g = RandomTensor(y.shape(), 113);
    ExpectClose(ops::Conv2d(x.To(gpu_), w.To(gpu_), b.To(gpu_), c.stride, c.padding), y, 1e-5f, what + " y");
    const ops::Conv2dGrads dc = ops::Conv2dBackward(g, x, w, c.stride, c.padding);
    const ops::Conv2dGrads dg = ops::Conv2dBackward(g.To(gpu_), x.To(gpu_), w.To(gpu_), c.stride, c.padding);
    ExpectClose(dg.dx, dc.dx, 1e-5f, what + " dx");
    ExpectClose(dg.dweight, dc.dweight, 1e-5f, what + " dweight");
    ExpectClose(dg.dbias, dc.dbias, 1e-6f, what + " dbias");
    // Only dx (the engine's first layer never asks for it; a frozen layer asks for nothing else).
    const ops::Conv2dGrads only = ops::Conv2dBackward(g.To(gpu_), x.To(gpu_), w.To(gpu_), c.stride, c.padding,
                                                      {true, false, false});
    EXPECT_FALSE(only.dweight.defined());
    EXPECT_EQ(only.dx.ToVector(), dg.dx.ToVector()) << what;
  }
}

TEST_F(OpsCuda, MaxPool2dMatchesCpuBitwise) {
  for (const Shape& shape : {Shape{64, 16, 28, 28}, Shape{3, 2, 7, 9}, Shape{1, 1, 2, 2}}) {
    for (int64_t k : {1, 2, 3}) {
      if (shape[2] < k || shape[3] < k) continue;
      const std::string what = ShapeToString(shape) + " k " + std::to_string(k);
      const Tensor x = RandomTensor(shape, 120);
      const ops::MaxPool2dResult c = ops::MaxPool2d(x, k), g = ops::MaxPool2d(x.To(gpu_), k);
      EXPECT_EQ(g.y.ToVector(), c.y.ToVector()) << what;
      EXPECT_EQ(g.indices.ToVector<int64_t>(), c.indices.ToVector<int64_t>()) << what;
      const Tensor gy = RandomTensor(c.y.shape(), 121);
      EXPECT_EQ(ops::MaxPool2dBackward(gy.To(gpu_), g.indices, k, shape).ToVector(),
                ops::MaxPool2dBackward(gy, c.indices, k, shape).ToVector())
          << what;
    }
  }
  // NaN and ties as on the CPU.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor t = Tensor::FromVector(std::vector<float>{3, 1, nan, 5, 3, 2, 9, nan}, {1, 1, 2, 4});
  EXPECT_EQ(ops::MaxPool2d(t.To(gpu_), 2).indices.ToVector<int64_t>(), (std::vector<int64_t>{0, 7}));
}

TEST_F(OpsCuda, CnnLayersAreDeterministic) {
  const Tensor x = RandomTensor({64, 16, 14, 14}, 130, gpu_), w = RandomTensor({32, 16, 3, 3}, 131, gpu_);
  const Tensor b = RandomTensor({32}, 132, gpu_), g = RandomTensor({64, 32, 14, 14}, 133, gpu_);
  auto run = [&] {
    const Tensor y = ops::Conv2d(x, w, b, 1, 1);
    const ops::Conv2dGrads d = ops::Conv2dBackward(g, x, w, 1, 1);
    const ops::MaxPool2dResult p = ops::MaxPool2d(y, 2);
    std::vector<std::vector<float>> out;
    for (const Tensor& t : {y, d.dx, d.dweight, d.dbias, p.y, ops::MaxPool2dBackward(p.y, p.indices, 2, y.shape())}) {
      out.push_back(t.ToVector());
    }
    return out;
  };
  EXPECT_TRUE(run() == run());
}

TEST_F(OpsCuda, ExpandFillInPlace) {
  Tensor s = Tensor::Scalar(3.0f, gpu_);
  Tensor e = ops::Expand(s, {4, 5}, 0.5f);
  EXPECT_EQ(e.device(), gpu_);
  EXPECT_EQ(e.ToVector(), std::vector<float>(20, 1.5f));

  Tensor t = Tensor::Empty({7}, gpu_);
  ops::Fill(t, 2.25f);
  EXPECT_EQ(t.ToVector(), std::vector<float>(7, 2.25f));

  Tensor x = RandomTensor({1000}, 60), y = RandomTensor({1000}, 61);
  Tensor dx = x.To(gpu_), dy = y.To(gpu_);
  ops::Axpy(-0.3f, dx, dy);
  ops::Axpy(-0.3f, x, y);
  EXPECT_EQ(dy.ToVector(), y.ToVector());
  ops::AddInPlace(dy, dx);
  ops::AddInPlace(y, x);
  EXPECT_EQ(dy.ToVector(), y.ToVector());
  ops::ScaleInPlace(dy, 0.125f);
  ops::ScaleInPlace(y, 0.125f);
  EXPECT_EQ(dy.ToVector(), y.ToVector());
  // Views.
  Tensor flat = Tensor::Full({6}, 1.0f, gpu_);
  Tensor v = flat.View(1, {2});
  ops::ScaleInPlace(v, 3.0f);
  EXPECT_EQ(flat.ToVector(), (std::vector<float>{1, 3, 3, 1, 1, 1}));
  ops::Synchronize(gpu_);
}

TEST_F(OpsCuda, DeviceMismatchAndContext) {
  Tensor a = Tensor::Zeros({2, 2}, gpu_), b = Tensor::Zeros({2, 2});
  ExpectTensorError([&] { ops::Matmul(a, b); }, {"Matmul", "[2, 2] float32 cuda:0", "[2, 2] float32 cpu", "different devices"});
  ExpectTensorError([&] { ops::Add(a, b); }, {"Add", "different devices"});
  ExpectTensorError([&] { ops::AddInPlace(a, b); }, {"AddInPlace", "different devices"});
  EXPECT_EQ(ops::MaxAbsDiff(a, b), 0.0f);  // any devices
  ExpectTensorError([&] { Tensor::Zeros({1}, Device::CUDA(CudaDeviceCount())); }, {"cuda:"});
#ifdef PSYNC_WITH_CUDA
  EXPECT_NE(cuda::ComputeStream(0), nullptr);
  EXPECT_NE(cuda::CublasHandle(0), nullptr);
  EXPECT_EQ(cuda::ComputeStream(0), cuda::ComputeStream(0));
  ExpectTensorError([] { PSYNC_CUDA_CHECK(cudaErrorInvalidValue); }, {"cudaErrorInvalidValue"});
#endif
}

TEST_F(OpsCuda, MlpStepMatchesCpu) {
  // A small forward/backward/SGD step, the shape of real training.
  Tensor x = RandomTensor({64, 32}, 70), w1 = RandomTensor({32, 48}, 71), b1 = RandomTensor({48}, 72);
  Tensor w2 = RandomTensor({48, 10}, 73), labels = RandomLabels(64, 10, 74);
  auto step = [&](Device d) {
    Tensor X = x.To(d), W1 = w1.To(d).Clone(), B1 = b1.To(d), W2 = w2.To(d).Clone(), L = labels.To(d);
    Tensor h = ops::Relu(ops::AddBias(ops::Matmul(X, W1), B1));
    Tensor logits = ops::Matmul(h, W2);
    Tensor loss = ops::CrossEntropy(logits, L);
    Tensor dlogits = ops::CrossEntropyBackward(ops::Expand(loss, {}, 0.0f), logits, L);
    dlogits = ops::CrossEntropyBackward(Tensor::Scalar(1.0f, d), logits, L);
    Tensor dw2 = ops::Matmul(h, dlogits, true, false);
    Tensor dh = ops::ReluBackward(ops::Matmul(dlogits, W2, false, true), h);
    Tensor dw1 = ops::Matmul(X, dh, true, false);
    Tensor db1 = ops::SumRows(dh);
    ops::Axpy(-0.1f, dw1, W1);
    ops::Axpy(-0.1f, dw2, W2);
    return std::vector<Tensor>{loss, W1, W2, db1};
  };
  auto cpu = step(Device::CPU());
  auto gpu = step(gpu_);
  for (size_t i = 0; i < cpu.size(); ++i) ExpectClose(gpu[i], cpu[i], 1e-5f, "tensor " + std::to_string(i));
}

TEST_F(OpsCuda, SetCurrentDeviceAndFreeOnAnotherThread) {
  cuda_device::SetCurrentDevice(0);
  ExpectTensorError([] { cuda_device::SetCurrentDevice(CudaDeviceCount()); }, {"cuda:"});
#ifdef PSYNC_WITH_CUDA
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
#endif
  // A storage freed on another thread (its own current device) must leave no
  // error behind for the next op on this thread.
  Tensor t = Tensor::Full({1000}, 1.0f, gpu_);
  std::thread([moved = std::move(t)]() mutable { moved = Tensor(); }).join();
  EXPECT_EQ(ops::Scale(Tensor::Full({3}, 2.0f, gpu_), 2.0f).ToVector(), std::vector<float>(3, 4.0f));
}

TEST_F(OpsCuda, SecondDeviceWhileCuda0IsCurrent) {
  if (CudaDeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  const Device g1 = Device::CUDA(1);
  cuda_device::SetCurrentDevice(0);
  Tensor a = RandomTensor({33, 17}, 80), b = RandomTensor({17, 9}, 81);
  Tensor c = ops::Matmul(a.To(g1), b.To(g1));
  EXPECT_EQ(c.device(), g1);
  EXPECT_LE(ops::MaxAbsDiff(c, ops::Matmul(a, b)), 1e-4f);
  EXPECT_EQ(ops::Relu(a.To(g1)).ToVector(), ops::Relu(a).ToVector());
  Tensor moved = a.To(g1).To(gpu_);  // peer copy
  EXPECT_EQ(moved.ToVector(), a.ToVector());
  { Tensor dropped = Tensor::Full({100}, 1.0f, g1); }  // freed while cuda:0 is current
  EXPECT_EQ(ops::Sum(Tensor::Full({10}, 1.0f, g1)).Item(), 10.0f);
#ifdef PSYNC_WITH_CUDA
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);  // ops restore the caller's device
#endif
}

TEST_F(OpsCuda, MoreThanTwoToThe31Elements) {
  // Grid-stride loops index with int64: an element past 2^31 is reached.
  const int64_t n = (int64_t{1} << 31) + 7;  // 8 GiB of floats
  Tensor t;
  try {
    t = Tensor::Empty({n}, gpu_);
  } catch (const TensorError& e) {
    GTEST_SKIP() << "cannot allocate 8 GiB: " << e.what();
  }
  ops::Fill(t, 1.5f);
  ops::ScaleInPlace(t, 2.0f);
  EXPECT_EQ(t.View(n - 3, {3}).ToVector(), std::vector<float>(3, 3.0f));
  EXPECT_EQ(t.View(0, {2}).ToVector(), std::vector<float>(2, 3.0f));
}

// Runs everywhere: without CUDA support the CUDA paths say how to get it.
TEST(OpsCudaUnavailable, ClearMessage) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  try {
    Tensor::Zeros({2}, Device::CUDA(0));
    ADD_FAILURE() << "expected TensorError";
  } catch (const TensorError& e) {
    const std::string msg = e.what();
    if (BuiltWithCuda()) {
      EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find("rebuild with nvcc on PATH"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(ops::Synchronize(Device::CUDA(0)), TensorError);
}

}  // namespace
}  // namespace psync
