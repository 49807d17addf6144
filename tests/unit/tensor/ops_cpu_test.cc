// Every CPU op against a naive (mostly double-precision) reference.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/tensor/test_util.h"
#include "psync/tensor/ops.h"

namespace psync {
namespace {

using ::psync::testing::ExpectTensorError;
using ::psync::testing::RandomLabels;
using ::psync::testing::RandomTensor;

// Row-major element (i, j) of op(x) where x is stored [r, c].
double At(const std::vector<float>& x, int64_t cols_stored, bool trans, int64_t i, int64_t j) {
  return trans ? x[j * cols_stored + i] : x[i * cols_stored + j];
}

std::vector<double> NaiveMatmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const auto va = a.ToVector(), vb = b.ToVector();
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const int64_t n = tb ? b.size(0) : b.size(1);
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) s += At(va, a.size(1), ta, i, p) * At(vb, b.size(1), tb, p, j);
      c[i * n + j] = s;
    }
  return c;
}

// Row-wise double log-softmax.
std::vector<double> NaiveLogSoftmax(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, static_cast<double>(x[i * cols + j]));
    double s = 0.0;
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[i * cols + j] - mx);
    for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = x[i * cols + j] - mx - std::log(s);
  }
  return y;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
  }
}

TEST(OpsCpu, MatmulAllTransposes) {
  const int64_t m = 13, k = 37, n = 9;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      Tensor a = RandomTensor(ta ? Shape{k, m} : Shape{m, k}, 1 + ta);
      Tensor b = RandomTensor(tb ? Shape{n, k} : Shape{k, n}, 3 + tb);
      Tensor c = ops::Matmul(a, b, ta, tb);
      EXPECT_EQ(c.shape(), (Shape{m, n}));
      ExpectNear(c.ToVector(), NaiveMatmul(a, b, ta, tb), 1e-5,
                 "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
  }
}

TEST(OpsCpu, MatmulDegenerateShapes) {
  // Empty inner dimension: all zeros, even in uninitialised output memory.
  Tensor c = ops::Matmul(Tensor::Zeros({3, 0}), Tensor::Zeros({0, 2}));
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  EXPECT_EQ(c.ToVector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ops::Matmul(Tensor::Zeros({0, 4}), Tensor::Zeros({4, 2})).shape(), (Shape{0, 2}));
  // Vectors as 1xK / Kx1.
  Tensor dot = ops::Matmul(Tensor::FromVector({1, 2, 3}, {1, 3}), Tensor::FromVector({4, 5, 6}, {3, 1}));
  EXPECT_EQ(dot.Item(), 32.0f);
}

TEST(OpsCpu, AddBiasAndSumRows) {
  Tensor x = RandomTensor({7, 5}, 10);
  Tensor bias = RandomTensor({5}, 11);
  const auto vx = x.ToVector(), vb = bias.ToVector();
  const auto y = ops::AddBias(x, bias).ToVector();
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(y[i * 5 + j], vx[i * 5 + j] + vb[j]);

  // SumRows: per column, chunks of 64 rows each in row order, then the chunk
  // sums in order, in double -> bitwise equal to this (301 rows: 4 full
  // chunks and a partial one).
  Tensor big = RandomTensor({301, 17}, 12);
  const auto vbig = big.ToVector();
  Tensor s = ops::SumRows(big);
  EXPECT_EQ(s.shape(), (Shape{17}));
  const auto vs = s.ToVector();
  for (int j = 0; j < 17; ++j) {
    double total = 0.0;
    for (int r0 = 0; r0 < 301; r0 += 64) {
      double part = 0.0;
      for (int i = r0; i < std::min(301, r0 + 64); ++i) part += vbig[i * 17 + j];
      total += part;
    }
    EXPECT_EQ(vs[j], static_cast<float>(total)) << j;
  }
  EXPECT_EQ(ops::SumRows(Tensor::Zeros({0, 3})).ToVector(), std::vector<float>(3, 0.0f));
}

TEST(OpsCpu, Elementwise) {
  Tensor a = RandomTensor({4, 6}, 20), b = RandomTensor({4, 6}, 21);
  const auto va = a.ToVector(), vb = b.ToVector();
  const auto add = ops::Add(a, b).ToVector(), sub = ops::Sub(a, b).ToVector(),
             mul = ops::Mul(a, b).ToVector(), sc = ops::Scale(a, -2.5f).ToVector(),
             relu = ops::Relu(a).ToVector(), rb = ops::ReluBackward(b, ops::Relu(a)).ToVector();
  for (size_t i = 0; i < va.size(); ++i) {
    EXPECT_EQ(add[i], va[i] + vb[i]);
    EXPECT_EQ(sub[i], va[i] - vb[i]);
    EXPECT_EQ(mul[i], va[i] * vb[i]);
    EXPECT_EQ(sc[i], va[i] * -2.5f);
    EXPECT_EQ(relu[i], va[i] > 0 ? va[i] : 0.0f);
    EXPECT_EQ(rb[i], va[i] > 0 ? vb[i] : 0.0f);
  }
  EXPECT_EQ(ops::Add(a, b).shape(), a.shape());
}

TEST(OpsCpu, SumAndMean) {
  Tensor x = RandomTensor({1001}, 30, Device::CPU(), -3.0f, 5.0f);
  const auto vx = x.ToVector();
  double acc = 0.0;
  for (float v : vx) acc += v;
  Tensor s = ops::Sum(x), m = ops::Mean(x);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(m.dim(), 0);
  EXPECT_EQ(s.Item(), static_cast<float>(acc));
  EXPECT_EQ(m.Item(), static_cast<float>(acc / 1001.0));
  EXPECT_EQ(ops::Sum(Tensor::Zeros({0})).Item(), 0.0f);
  EXPECT_TRUE(std::isnan(ops::Mean(Tensor::Zeros({0})).Item()));
  // Accumulating in double: many small values on a big one are not lost.
  std::vector<float> v(1 << 16, 1.0f);
  v[0] = 1 << 24;
  EXPECT_EQ(ops::Sum(Tensor::FromVector(v, {1 << 16})).Item(), static_cast<float>((1 << 24) + (1 << 16) - 1));
}

TEST(OpsCpu, LogSoftmax) {
  Tensor x = RandomTensor({9, 11}, 40, Device::CPU(), -20.0f, 20.0f);
  Tensor y = ops::LogSoftmax(x);
  EXPECT_EQ(y.shape(), x.shape());
  ExpectNear(y.ToVector(), NaiveLogSoftmax(x.ToVector(), 9, 11), 1e-6, "log_softmax");
  // Large logits must not overflow.
  Tensor big = Tensor::FromVector({1000.0f, 1000.0f}, {1, 2});
  ExpectNear(ops::LogSoftmax(big).ToVector(), {-std::log(2.0), -std::log(2.0)}, 1e-6, "big");
}

TEST(OpsCpu, LogSoftmaxOfEmptyRowsIsEmpty) {
  // Rows without columns have nothing to normalise; no element may be read.
  Tensor no_cols = Tensor::Zeros({3, 0});
  Tensor y = ops::LogSoftmax(no_cols);
  EXPECT_EQ(y.shape(), (Shape{3, 0}));
  EXPECT_EQ(ops::LogSoftmax(Tensor::Zeros({0, 4})).shape(), (Shape{0, 4}));
}

TEST(OpsCpu, CrossEntropyAgainstDoubleReference) {
  const int64_t rows = 33, cols = 10;
  Tensor logits = RandomTensor({rows, cols}, 50, Device::CPU(), -4.0f, 4.0f);
  Tensor labels = RandomLabels(rows, cols, 51);
  const auto lsm = NaiveLogSoftmax(logits.ToVector(), rows, cols);
  const auto vl = labels.ToVector<int64_t>();
  double want = 0.0;
  for (int64_t i = 0; i < rows; ++i) want -= lsm[i * cols + vl[i]];
  want /= rows;
  Tensor loss = ops::CrossEntropy(logits, labels);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_NEAR(loss.Item(), want, 1e-6 * std::fabs(want));

  // Backward: g * (softmax - onehot) / N.
  const float g = 0.75f;
  Tensor grad = ops::CrossEntropyBackward(Tensor::Scalar(g), logits, labels);
  EXPECT_EQ(grad.shape(), logits.shape());
  std::vector<double> want_grad(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      want_grad[i * cols + j] =
          g * (std::exp(lsm[i * cols + j]) - (j == vl[i] ? 1.0 : 0.0)) / rows;
  ExpectNear(grad.ToVector(), want_grad, 1e-6, "ce backward");

  // Finite differences of the loss agree with the gradient (g = 1).
  Tensor g1 = ops::CrossEntropyBackward(Tensor::Scalar(1.0f), logits, labels);
  const auto vg = g1.ToVector();
  for (int64_t idx : {0L, 7L, 45L, 329L}) {
    const float h = 1e-2f;
    Tensor plus = logits.Clone(), minus = logits.Clone();
    plus.data<float>()[idx] += h;
    minus.data<float>()[idx] -= h;
    const double fd = (static_cast<double>(ops::CrossEntropy(plus, labels).Item()) -
                       ops::CrossEntropy(minus, labels).Item()) / (2.0 * h);
    EXPECT_NEAR(vg[idx], fd, 2e-4) << idx;
  }
}

TEST(OpsCpu, CrossEntropyRejectsBadTargets) {
  Tensor logits = Tensor::Zeros({2, 3});
  auto targets = [](std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return Tensor::FromVector(v, {n});
  };
  ExpectTensorError([&] { ops::CrossEntropy(logits, targets({0, 3})); }, {"CrossEntropy", "target", "row 1", "[0, 3)"});
  ExpectTensorError([&] { ops::CrossEntropy(logits, targets({-1, 0})); }, {"target -1", "row 0"});
  ExpectTensorError([&] { ops::CrossEntropy(logits, Tensor::FromVector({0, 1}, {2})); },
                    {"CrossEntropy", "targets [2] float32 cpu", "must be int64"});
  ExpectTensorError([&] { ops::CrossEntropy(logits, targets({0, 1, 2})); },
                    {"CrossEntropy", "[2, 3]", "[3]", "one entry per row"});
  ExpectTensorError([&] { ops::CrossEntropyBackward(Tensor::Zeros({2}), logits, targets({0, 1})); },
                    {"CrossEntropyBackward", "grad"});
}

TEST(OpsCpu, ExpandFillCopy) {
  Tensor e = ops::Expand(Tensor::Scalar(3.0f), {2, 3}, 0.5f);
  EXPECT_EQ(e.shape(), (Shape{2, 3}));
  EXPECT_EQ(e.ToVector(), std::vector<float>(6, 1.5f));
  EXPECT_EQ(ops::Expand(Tensor::Scalar(2.0f), {}).Item(), 2.0f);
  EXPECT_EQ(ops::Expand(Tensor::FromVector({4}, {1}), {3}).ToVector(), std::vector<float>(3, 4.0f));

  Tensor t = Tensor::Empty({5});
  ops::Fill(t, -1.25f);
  EXPECT_EQ(t.ToVector(), std::vector<float>(5, -1.25f));

  // Copy needs equal element counts, not shapes; it writes through views.
  Tensor flat = Tensor::Zeros({8});
  Tensor dst = flat.View(2, {2, 2});
  ops::Copy(dst, Tensor::FromVector({1, 2, 3, 4}, {4}));
  EXPECT_EQ(flat.ToVector(), (std::vector<float>{0, 0, 1, 2, 3, 4, 0, 0}));
  ExpectTensorError([&] { ops::Copy(dst, Tensor::Zeros({3})); }, {"Copy", "[2, 2]", "[3]"});
}

TEST(OpsCpu, InPlace) {
  Tensor x = RandomTensor({3, 4}, 60), y0 = RandomTensor({3, 4}, 61);
  const auto vx = x.ToVector(), vy = y0.ToVector();
  Tensor y = y0.Clone();
  ops::Axpy(-0.1f, x, y);
  auto got = y.ToVector();
  for (size_t i = 0; i < vx.size(); ++i) EXPECT_EQ(got[i], vy[i] + -0.1f * vx[i]);

  y = y0.Clone();
  ops::AddInPlace(y, x);
  got = y.ToVector();
  for (size_t i = 0; i < vx.size(); ++i) EXPECT_EQ(got[i], vy[i] + vx[i]);

  y = y0.Clone();
  ops::ScaleInPlace(y, 0.25f);
  got = y.ToVector();
  for (size_t i = 0; i < vx.size(); ++i) EXPECT_EQ(got[i], vy[i] * 0.25f);

  // In-place ops on a view touch only the view.
  Tensor flat = Tensor::Full({6}, 1.0f);
  Tensor v = flat.View(1, {2});
  ops::ScaleInPlace(v, 3.0f);
  ops::AddInPlace(v, Tensor::Full({2}, 1.0f));
  EXPECT_EQ(flat.ToVector(), (std::vector<float>{1, 4, 4, 1, 1, 1}));
}

TEST(OpsCpu, MaxAbsDiff) {
  Tensor a = Tensor::FromVector({1, 2, 3}, {3}), b = Tensor::FromVector({1, 2.5f, 2}, {3});
  EXPECT_EQ(ops::MaxAbsDiff(a, b), 1.0f);
  EXPECT_EQ(ops::MaxAbsDiff(a, a), 0.0f);
  Tensor n = Tensor::FromVector({1, NAN, 3}, {3});
  EXPECT_TRUE(std::isnan(ops::MaxAbsDiff(a, n)));
}

TEST(OpsCpu, Deterministic) {
  Tensor a = RandomTensor({64, 128}, 70), b = RandomTensor({128, 32}, 71);
  Tensor labels = RandomLabels(64, 32, 72);
  auto run = [&] {
    Tensor h = ops::Relu(ops::Matmul(a, b));
    Tensor loss = ops::CrossEntropy(h, labels);
    Tensor g = ops::CrossEntropyBackward(Tensor::Scalar(1.0f), h, labels);
    std::vector<float> out = ops::SumRows(g).ToVector();
    out.push_back(loss.Item());
    out.push_back(ops::Sum(g).Item());
    return out;
  };
  EXPECT_EQ(run(), run());
}

TEST(OpsCpu, ErrorsNameOpShapesAndDevices) {
  Tensor a = Tensor::Zeros({2, 3}), b = Tensor::Zeros({4, 5});
  ExpectTensorError([&] { ops::Matmul(a, b); },
                    {"Matmul", "[2, 3] float32 cpu", "[4, 5] float32 cpu", "inner dimensions differ (3 vs 4)"});
  ExpectTensorError([&] { ops::Matmul(a, b, true, false); }, {"Matmul(a^T, b)", "(2 vs 4)"});
  ExpectTensorError([&] { ops::Matmul(Tensor::Zeros({3}), b); }, {"Matmul", "2 dimension"});
  ExpectTensorError([&] { ops::Add(a, Tensor::Zeros({3, 2})); }, {"Add", "[2, 3]", "[3, 2]", "shapes differ"});
  ExpectTensorError([&] { ops::Sub(a, b); }, {"Sub"});
  ExpectTensorError([&] { ops::Mul(a, b); }, {"Mul"});
  ExpectTensorError([&] { ops::ReluBackward(a, b); }, {"ReluBackward"});
  ExpectTensorError([&] { ops::AddBias(a, Tensor::Zeros({2})); }, {"AddBias", "bias [2] float32 cpu"});
  ExpectTensorError([&] { ops::SumRows(Tensor::Scalar(1.0f)); }, {"SumRows", "at least one dimension"});
  ExpectTensorError([&] { ops::LogSoftmax(Tensor::Zeros({2})); }, {"LogSoftmax"});
  ExpectTensorError([&] { ops::Expand(a, {2}); }, {"Expand", "[2, 3]"});
  Tensor y = Tensor::Zeros({5});
  ExpectTensorError([&] { ops::Axpy(1.0f, a, y); }, {"Axpy", "[2, 3]", "[5]"});
  ExpectTensorError([&] { ops::AddInPlace(y, a); }, {"AddInPlace"});
  ExpectTensorError([&] { ops::MaxAbsDiff(a, y); }, {"MaxAbsDiff"});

  Tensor undefined;
  ExpectTensorError([&] { ops::Matmul(a, undefined); }, {"Matmul", "b undefined", "b is undefined"});
  ExpectTensorError([&] { ops::Relu(undefined); }, {"Relu", "undefined"});
  ExpectTensorError([&] { ops::Fill(undefined, 1.0f); }, {"Fill", "undefined"});
  ExpectTensorError([&] { ops::Sum(undefined); }, {"Sum", "undefined"});
  ExpectTensorError([&] { ops::ScaleInPlace(undefined, 1.0f); }, {"ScaleInPlace"});
  ExpectTensorError([&] { ops::Copy(y, undefined); }, {"Copy", "src is undefined"});
}

}  // namespace
}  // namespace psync
