// The CNN layer ops on the CPU (Conv2d and MaxPool2d, forward and backward)
// against direct double loops written out here, in float32 and float64,
// over strides, paddings, non-square kernels, the 1x1 shortcut, kernels
// larger than the image; plus gradients asked for one by one, gradient
// destinations, empty batches, strided inputs, determinism, ties and NaN in
// pooling, and error messages.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/unit/tensor/test_util.h"
#include "psync/tensor/ops.h"

namespace psync {
namespace {

using ::psync::testing::ExpectTensorError;
using ::psync::testing::RandomTensor;

using Vec = std::vector<double>;

Vec AsDouble(const Tensor& t) { return t.To(kFloat64).ToVector<double>(); }

void ExpectClose(const Tensor& got, const Vec& want, double tol, const std::string& what) {
  const Vec g = AsDouble(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
  }
}

// ---------------------------------------------------------------- references (double)

struct ConvCase {
  int64_t n, cin, h, w, cout, kh, kw, stride, padding;
  int64_t ho() const { return (h + 2 * padding - kh) / stride + 1; }
  int64_t wo() const { return (w + 2 * padding - kw) / stride + 1; }
  std::string Name() const {
    return absl::StrCat("x [", n, ", ", cin, ", ", h, ", ", w, "] w [", cout, ", ", cin, ", ", kh, ", ", kw,
                        "] stride ", stride, " padding ", padding);
  }
};

struct ConvRef {
  Vec y, dx, dw, db;
};

// y = conv(x, w) + b and the gradients of sum(y * g), by the definition.
ConvRef RefConv(const ConvCase& c, const Vec& x, const Vec& w, const Vec& b, const Vec& g) {
  const int64_t ho = c.ho(), wo = c.wo();
  ConvRef r;
  r.y.assign(static_cast<size_t>(c.n * c.cout * ho * wo), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(static_cast<size_t>(c.cout), 0.0);
  for (int64_t n = 0; n < c.n; ++n) {
    for (int64_t o = 0; o < c.cout; ++o) {
      for (int64_t oh = 0; oh < ho; ++oh) {
        for (int64_t ow = 0; ow < wo; ++ow) {
          const size_t yi = static_cast<size_t>(((n * c.cout + o) * ho + oh) * wo + ow);
          double acc = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
          for (int64_t ci = 0; ci < c.cin; ++ci) {
            for (int64_t i = 0; i < c.kh; ++i) {
              for (int64_t j = 0; j < c.kw; ++j) {
                const int64_t ih = oh * c.stride - c.padding + i, iw = ow * c.stride - c.padding + j;
                if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
                const size_t xi = static_cast<size_t>(((n * c.cin + ci) * c.h + ih) * c.w + iw);
                const size_t wi = static_cast<size_t>(((o * c.cin + ci) * c.kh + i) * c.kw + j);
                acc += w[wi] * x[xi];
                r.dx[xi] += w[wi] * g[yi];
                r.dw[wi] += x[xi] * g[yi];
              }
            }
          }
          r.y[yi] = acc;
          r.db[static_cast<size_t>(o)] += g[yi];
        }
      }
    }
  }
  return r;
}

// ---------------------------------------------------------------- Conv2d

const std::vector<ConvCase>& Cases() {
  static const std::vector<ConvCase> cases = {
      {2, 3, 5, 5, 4, 3, 3, 1, 1},    // 3x3 "same"
      {3, 1, 28, 28, 16, 3, 3, 1, 1},  // the CNN's first layer
      {3, 2, 7, 6, 5, 3, 2, 2, 0},    // non-square kernel, stride 2, no padding
      {2, 4, 6, 5, 3, 1, 1, 1, 0},    // 1x1: the column matrix is the image
      {2, 2, 6, 6, 3, 1, 1, 2, 0},    // 1x1 at stride 2 (im2col again)
      {1, 2, 3, 4, 2, 5, 5, 1, 2},    // kernel larger than the image
      {2, 3, 9, 8, 2, 3, 3, 3, 2},    // stride 3, padding 2
      {1, 1, 1, 1, 1, 1, 1, 1, 0},    // everything 1
      {2, 3, 4, 4, 2, 4, 4, 1, 0},    // one output position
  };
  return cases;
}

TEST(ConvOpsCpu, Conv2dForwardAndBackwardAgainstReference) {
  uint32_t seed = 1;
  for (const ConvCase& c : Cases()) {
    for (DType dt : {kFloat32, kFloat64}) {
      // float32: dweight sums up to 2352 products (3 images x 784 positions).
      const double tol = dt == kFloat32 ? 3e-5 : 1e-13;
      const Tensor x = RandomTensor({c.n, c.cin, c.h, c.w}, seed++).To(dt);
      const Tensor w = RandomTensor({c.cout, c.cin, c.kh, c.kw}, seed++).To(dt);
      const Tensor b = RandomTensor({c.cout}, seed++).To(dt);
      const Tensor g = RandomTensor({c.n, c.cout, c.ho(), c.wo()}, seed++).To(dt);
      const std::string what = c.Name() + " " + DTypeName(dt);
      const ConvRef ref = RefConv(c, AsDouble(x), AsDouble(w), AsDouble(b), AsDouble(g));
      const Tensor y = ops::Conv2d(x, w, b, c.stride, c.padding);
      EXPECT_EQ(y.shape(), (Shape{c.n, c.cout, c.ho(), c.wo()})) << what;
      EXPECT_EQ(y.dtype(), dt);
      ExpectClose(y, ref.y, tol, what + " y");
      const ops::Conv2dGrads d = ops::Conv2dBackward(g, x, w, c.stride, c.padding);
      ExpectClose(d.dx, ref.dx, tol, what + " dx");
      ExpectClose(d.dweight, ref.dw, tol, what + " dweight");
      ExpectClose(d.dbias, ref.db, tol, what + " dbias");
      // Without a bias.
      const ConvRef nob = RefConv(c, AsDouble(x), AsDouble(w), {}, AsDouble(g));
      ExpectClose(ops::Conv2d(x, w, Tensor(), c.stride, c.padding), nob.y, tol, what + " y without bias");
    }
  }
}

TEST(ConvOpsCpu, Conv2dOnlyTheGradientsAskedForAndDestinations) {
  const Tensor x = RandomTensor({2, 3, 6, 6}, 20), w = RandomTensor({4, 3, 3, 3}, 21), g = RandomTensor({2, 4, 6, 6}, 22);
  const ops::Conv2dGrads all = ops::Conv2dBackward(g, x, w, 1, 1);
  const ops::Conv2dGrads only_dx = ops::Conv2dBackward(g, x, w, 1, 1, {true, false, false});
  EXPECT_FALSE(only_dx.dweight.defined());
  EXPECT_FALSE(only_dx.dbias.defined());
  EXPECT_EQ(only_dx.dx.ToVector(), all.dx.ToVector());
  // dweight and dbias into slots of one flat buffer (a DDP bucket).
  Tensor flat = Tensor::Full({4 * 27 + 4 + 1}, 7.0f);
  const Tensor dw_slot = flat.View(0, {4, 3, 3, 3}), db_slot = flat.View(4 * 27, {4});
  const ops::Conv2dGrads params = ops::Conv2dBackward(g, x, w, 1, 1, {false, true, true}, dw_slot, db_slot);
  EXPECT_FALSE(params.dx.defined());
  EXPECT_TRUE(params.dweight.IsSameView(dw_slot));
  EXPECT_TRUE(params.dbias.IsSameView(db_slot));
  EXPECT_EQ(dw_slot.ToVector(), all.dweight.ToVector());
  EXPECT_EQ(db_slot.ToVector(), all.dbias.ToVector());
  EXPECT_EQ(flat.ToVector().back(), 7.0f);  // untouched past the slots
  // An empty batch: an empty output, zero parameter gradients.
  const Tensor x0 = Tensor::Zeros({0, 3, 6, 6});
  EXPECT_EQ(ops::Conv2d(x0, w, Tensor(), 1, 1).shape(), (Shape{0, 4, 6, 6}));
  const ops::Conv2dGrads e = ops::Conv2dBackward(Tensor::Zeros({0, 4, 6, 6}), x0, w, 1, 1);
  EXPECT_EQ(e.dx.shape(), (Shape{0, 3, 6, 6}));
  EXPECT_EQ(e.dweight.ToVector(), std::vector<float>(4 * 27, 0.0f));
  EXPECT_EQ(e.dbias.ToVector(), std::vector<float>(4, 0.0f));
}

TEST(ConvOpsCpu, Conv2dTakesStridedInputs) {
  // x as a permuted view (NHWC storage), weight as a slice of a bigger tensor.
  const Tensor nhwc = RandomTensor({2, 5, 5, 3}, 30), big = RandomTensor({6, 3, 3, 3}, 31), b = RandomTensor({4}, 32);
  const Tensor x = nhwc.Permute({0, 3, 1, 2}), w = big.Narrow(0, 1, 4);
  ASSERT_FALSE(x.is_contiguous());
  const Tensor g = RandomTensor({2, 4, 5, 5}, 33).Permute({0, 1, 3, 2});
  EXPECT_EQ(ops::Conv2d(x, w, b, 1, 1).ToVector(), ops::Conv2d(x.Contiguous(), w.Contiguous(), b, 1, 1).ToVector());
  const ops::Conv2dGrads s = ops::Conv2dBackward(g, x, w, 1, 1);
  const ops::Conv2dGrads c = ops::Conv2dBackward(g.Contiguous(), x.Contiguous(), w.Contiguous(), 1, 1);
  EXPECT_EQ(s.dx.ToVector(), c.dx.ToVector());
  EXPECT_EQ(s.dweight.ToVector(), c.dweight.ToVector());
  EXPECT_EQ(s.dbias.ToVector(), c.dbias.ToVector());
  EXPECT_TRUE(s.dx.is_contiguous());
}

TEST(ConvOpsCpu, Conv2dErrorsNameTheOpAndOperands) {
  const Tensor x = Tensor::Zeros({2, 3, 5, 5}), w = Tensor::Zeros({4, 3, 3, 3}), b = Tensor::Zeros({4});
  ExpectTensorError([&] { ops::Conv2d(x, Tensor::Zeros({4, 2, 3, 3}), b, 1, 1); },
                    {"Conv2d(x [2, 3, 5, 5] float32 cpu, weight [4, 2, 3, 3] float32 cpu, bias [4] float32 cpu)",
                     "Cin = 2 but x has 3 channels"});
  ExpectTensorError([&] { ops::Conv2d(x, w, Tensor::Zeros({3}), 1, 1); }, {"Conv2d", "bias must be [4]"});
  ExpectTensorError([&] { ops::Conv2d(x, w, b, 0, 1); }, {"Conv2d", "stride must be >= 1, got 0"});
  ExpectTensorError([&] { ops::Conv2d(x, w, b, 1, -1); }, {"Conv2d", "padding must be >= 0, got -1"});
  ExpectTensorError([&] { ops::Conv2d(Tensor::Zeros({1, 3, 2, 2}), w, b, 1, 0); },
                    {"Conv2d", "the 3x3 kernel is larger than the padded 2x2 image (padding 0)"});
  ExpectTensorError([&] { ops::Conv2d(Tensor::Zeros({3, 5, 5}), w, b, 1, 1); },
                    {"Conv2d", "x must have 4 dimension(s), got 3"});
  ExpectTensorError([&] { ops::Conv2d(x, w.To(kFloat64), Tensor(), 1, 1); },
                    {"Conv2d(x [2, 3, 5, 5] float32 cpu, weight [4, 3, 3, 3] float64 cpu)", "dtypes differ"});
  ExpectTensorError([&] { ops::Conv2d(Tensor::Zeros({2, 0, 5, 5}), Tensor::Zeros({4, 0, 3, 3}), b, 1, 1); },
                    {"Conv2d", "must be positive"});
  ExpectTensorError([&] { ops::Conv2dBackward(Tensor::Zeros({2, 4, 4, 4}), x, w, 1, 1); },
                    {"Conv2dBackward(grad [2, 4, 4, 4] float32 cpu", "grad must be the forward's output shape [2, 4, 5, 5]"});
  ExpectTensorError(
      [&] { ops::Conv2dBackward(Tensor::Zeros({2, 4, 5, 5}), x, w, 1, 1, {true, true, true}, Tensor::Zeros({4, 27})); },
      {"Conv2dBackward", "dweight must be a contiguous [4, 3, 3, 3] float32 tensor on cpu, got [4, 27] float32 cpu"});
}

// ---------------------------------------------------------------- MaxPool2d

TEST(ConvOpsCpu, MaxPool2dAgainstReference) {
  struct P {
    Shape shape;
    int64_t k;
  };
  uint32_t seed = 40;
  for (const P& p : {P{{2, 3, 4, 4}, 2}, P{{1, 2, 5, 7}, 2}, P{{2, 1, 6, 9}, 3}, P{{1, 2, 3, 3}, 1},
                     P{{4, 16, 28, 28}, 2}, P{{1, 1, 2, 2}, 2}}) {
    for (DType dt : {kFloat32, kFloat64}) {
      const int64_t n = p.shape[0] * p.shape[1], h = p.shape[2], w = p.shape[3], ho = h / p.k, wo = w / p.k;
      const Tensor x = RandomTensor(p.shape, seed++).To(dt);
      const Tensor g = RandomTensor({p.shape[0], p.shape[1], ho, wo}, seed++).To(dt);
      const std::string what = ShapeToString(p.shape) + " k " + std::to_string(p.k) + " " + DTypeName(dt);
      const ops::MaxPool2dResult r = ops::MaxPool2d(x, p.k);
      ASSERT_EQ(r.y.shape(), (Shape{p.shape[0], p.shape[1], ho, wo})) << what;
      ASSERT_EQ(r.indices.dtype(), kInt64);
      const Vec xv = AsDouble(x), gv = AsDouble(g), yv = AsDouble(r.y);
      const std::vector<int64_t> iv = r.indices.ToVector<int64_t>();
      Vec dx(xv.size(), 0.0);
      for (int64_t pl = 0; pl < n; ++pl) {
        for (int64_t oh = 0; oh < ho; ++oh) {
          for (int64_t ow = 0; ow < wo; ++ow) {
            double best = -INFINITY;
            int64_t at = -1;
            for (int64_t i = 0; i < p.k; ++i) {
              for (int64_t j = 0; j < p.k; ++j) {
                const int64_t e = (oh * p.k + i) * w + ow * p.k + j;
                if (xv[static_cast<size_t>(pl * h * w + e)] > best) {
                  best = xv[static_cast<size_t>(pl * h * w + e)];
                  at = e;
                }
              }
            }
            const size_t o = static_cast<size_t>((pl * ho + oh) * wo + ow);
            ASSERT_EQ(yv[o], best) << what;
            ASSERT_EQ(iv[o], at) << what;
            dx[static_cast<size_t>(pl * h * w + at)] = gv[o];
          }
        }
      }
      EXPECT_EQ(AsDouble(ops::MaxPool2dBackward(g, r.indices, p.k, p.shape)), dx) << what;
    }
  }
}

TEST(ConvOpsCpu, MaxPool2dTiesNanAndInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Four 2x2 windows of one 4x4 plane: a tie (the first max wins), a NaN
  // (wins, and a later NaN takes the index), all -inf (the first position),
  // and +inf.
  const Tensor x = Tensor::FromVector(std::vector<float>{3, 1, nan, 5,      //
                                                         3, 2, 9, nan,      //
                                                         -inf, -inf, 1, inf,  //
                                                         -inf, -inf, 2, 0},
                                      {1, 1, 4, 4});
  const ops::MaxPool2dResult r = ops::MaxPool2d(x, 2);
  const std::vector<float> y = r.y.ToVector();
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], -inf);
  EXPECT_EQ(y[3], inf);
  EXPECT_EQ(r.indices.ToVector<int64_t>(), (std::vector<int64_t>{0, 7, 8, 11}));
  const Tensor dx = ops::MaxPool2dBackward(Tensor::FromVector(std::vector<float>{1, 2, 3, 4}, {1, 1, 2, 2}), r.indices,
                                           2, x.shape());
  EXPECT_EQ(dx.ToVector(), (std::vector<float>{1, 0, 0, 0, 0, 0, 0, 2, 3, 0, 0, 4, 0, 0, 0, 0}));
}

TEST(ConvOpsCpu, MaxPool2dErrors) {
  const Tensor x = Tensor::Zeros({1, 2, 4, 4});
  ExpectTensorError([&] { ops::MaxPool2d(x, 0); }, {"MaxPool2d(x [1, 2, 4, 4] float32 cpu)", "kernel must be >= 1"});
  ExpectTensorError([&] { ops::MaxPool2d(x, 5); }, {"MaxPool2d", "the 5x5 window is larger than the 4x4 image"});
  ExpectTensorError([&] { ops::MaxPool2d(Tensor::Zeros({2, 4, 4}), 2); }, {"MaxPool2d", "x must have 4 dimension(s)"});
  const ops::MaxPool2dResult r = ops::MaxPool2d(x, 2);
  ExpectTensorError([&] { ops::MaxPool2dBackward(r.y, r.indices, 2, {1, 2, 6, 6}); },
                    {"MaxPool2dBackward(grad [1, 2, 2, 2] float32 cpu, indices [1, 2, 2, 2] int64 cpu)",
                     "grad and indices must be [1, 2, 3, 3]"});
  ExpectTensorError([&] { ops::MaxPool2dBackward(r.y, r.y, 2, x.shape()); }, {"MaxPool2dBackward", "indices must be int64"});
  // An index outside its window names the window.
  const Tensor bad = Tensor::FromVector(std::vector<int64_t>{0, 2, 8, 3, 0, 2, 8, 10}, {1, 2, 2, 2});
  ExpectTensorError([&] { ops::MaxPool2dBackward(r.y, bad, 2, x.shape()); },
                    {"MaxPool2dBackward: indices[plane 0, 1, 1] = 3 is not in its 2x2 window (rows 2..3, columns 2..3"});
}

// ---------------------------------------------------------------- determinism

TEST(ConvOpsCpu, SameBitsEveryRun) {
  // The CNN's second layer at batch 64: conv, pool, and every backward, twice.
  const Tensor x = RandomTensor({64, 16, 14, 14}, 50), w = RandomTensor({32, 16, 3, 3}, 51), b = RandomTensor({32}, 52);
  const Tensor g = RandomTensor({64, 32, 14, 14}, 53), gp = RandomTensor({64, 32, 7, 7}, 54);
  auto run = [&] {
    std::vector<std::vector<float>> out;
    const Tensor y = ops::Conv2d(x, w, b, 1, 1);
    const ops::Conv2dGrads d = ops::Conv2dBackward(g, x, w, 1, 1);
    const ops::MaxPool2dResult p = ops::MaxPool2d(y, 2);
    for (const Tensor& t : {y, d.dx, d.dweight, d.dbias, p.y, ops::MaxPool2dBackward(gp, p.indices, 2, y.shape())}) {
      out.push_back(t.ToVector());
    }
    return out;
  };
  EXPECT_TRUE(run() == run());
}

}  // namespace
}  // namespace psync
