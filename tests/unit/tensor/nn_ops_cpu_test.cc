// The GPT layer ops on the CPU (Embedding, LayerNorm, Gelu, CausalSoftmax,
// forward and backward) against straightforward double references written
// out here, in float32 and float64; determinism; strided and empty inputs;
// extreme values; error messages; and the vectorized exp they use.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/tensor/test_util.h"
#include "worker/tensor/cpu/vec_math.h"
#include "psync/tensor/ops.h"

namespace psync {
namespace {

using ::psync::testing::ExpectTensorError;
using ::psync::testing::RandomTensor;

using Vec = std::vector<double>;

Vec AsDouble(const Tensor& t) { return t.To(kFloat64).ToVector<double>(); }

Tensor RandomIds(const Shape& shape, int64_t rows, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, rows - 1);
  std::vector<int64_t> v(static_cast<size_t>(NumelOf(shape)));
  for (int64_t& x : v) x = dist(gen);
  return Tensor::FromVector(v, shape);
}

// |got - want| <= tol * (1 + |want|) element by element.
void ExpectClose(const Tensor& got, const Vec& want, double tol, const std::string& what) {
  const Vec g = AsDouble(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
  }
}

// ---------------------------------------------------------------- references (double)

struct LayerNormRef {
  Vec y, mean, rstd, dx, dw, db;
};
LayerNormRef RefLayerNorm(const Vec& x, const Vec& w, const Vec& b, const Vec& g, int64_t rows, int64_t c,
                          double eps) {
  LayerNormRef r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dw.assign(static_cast<size_t>(c), 0.0);
  r.db.assign(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = &x[i * c];
    double m = 0, v = 0;
    for (int64_t j = 0; j < c; ++j) m += xr[j];
    m /= c;
    for (int64_t j = 0; j < c; ++j) v += (xr[j] - m) * (xr[j] - m);
    v /= c;
    const double rs = 1 / std::sqrt(v + eps);
    r.mean.push_back(m);
    r.rstd.push_back(rs);
    // dL/dx_k = sum_j g_j w_j dxhat_j/dx_k, dxhat_j/dx_k = rs (delta_jk - 1/c - xhat_j xhat_k / c).
    for (int64_t k = 0; k < c; ++k) {
      const double xk = (xr[k] - m) * rs;
      r.y[i * c + k] = xk * w[k] + b[k];
      double d = 0;
      for (int64_t j = 0; j < c; ++j) {
        const double xj = (xr[j] - m) * rs;
        d += g[i * c + j] * w[j] * rs * ((j == k ? 1.0 : 0.0) - 1.0 / c - xj * xk / c);
      }
      r.dx[i * c + k] = d;
      r.dw[k] += g[i * c + k] * xk;
      r.db[k] += g[i * c + k];
    }
  }
  return r;
}

double RefGelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double RefGeluGrad(double x) {
  const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

// p and dscores for [rows, t] scores, row r = query r % t. With
// scale_in_float the scaled scores are rounded to float first (float32
// tensors are scaled in float32, as torch does).
void RefCausalSoftmax(const Vec& s, const Vec& g, int64_t rows, int64_t t, double scale, bool scale_in_float, Vec* p,
                      Vec* ds) {
  p->assign(s.size(), 0.0);
  ds->assign(s.size(), 0.0);
  auto z_of = [&](double v) {
    return scale_in_float ? static_cast<double>(static_cast<float>(v) * static_cast<float>(scale)) : scale * v;
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % t;
    double mx = -INFINITY, z = 0, dot = 0;
    for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, z_of(s[r * t + j]));
    for (int64_t j = 0; j <= i; ++j) z += std::exp(z_of(s[r * t + j]) - mx);
    for (int64_t j = 0; j <= i; ++j) (*p)[r * t + j] = std::exp(z_of(s[r * t + j]) - mx) / z;
    for (int64_t j = 0; j <= i; ++j) dot += g[r * t + j] * (*p)[r * t + j];
    for (int64_t j = 0; j <= i; ++j) (*ds)[r * t + j] = scale * (*p)[r * t + j] * (g[r * t + j] - dot);
  }
}

// ---------------------------------------------------------------- Embedding

TEST(NnOpsCpu, EmbeddingGathersRowsAndBackwardScatterAddsInPositionOrder) {
  const int64_t V = 11, C = 7;
  const Tensor ids = RandomIds({3, 5}, V, 1), w = RandomTensor({V, C}, 2), g = RandomTensor({3, 5, C}, 3);
  const Tensor y = ops::Embedding(ids, w);
  ASSERT_EQ(y.shape(), (Shape{3, 5, C}));
  const std::vector<int64_t> id = ids.ToVector<int64_t>();
  const std::vector<float> wv = w.ToVector(), yv = y.ToVector(), gv = g.ToVector();
  std::vector<double> want(static_cast<size_t>(V * C), 0.0);
  for (size_t i = 0; i < id.size(); ++i) {
    for (int64_t j = 0; j < C; ++j) {
      EXPECT_EQ(yv[i * C + j], wv[id[i] * C + j]);  // a copy: bitwise
      want[id[i] * C + j] += gv[i * C + j];         // double, increasing position
    }
  }
  // The kernel sums the same values in the same order: bitwise equal.
  const std::vector<float> dw = ops::EmbeddingBackward(g, ids, V).ToVector();
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(dw[k], static_cast<float>(want[k])) << k;

  // float64 too, and into a destination (a view of a bigger buffer).
  const Tensor gd = g.To(kFloat64), wd = w.To(kFloat64);
  EXPECT_EQ(AsDouble(ops::Embedding(ids, wd)), AsDouble(y));
  Tensor flat = Tensor::Full({V * C + 3}, -1.0, kFloat64);
  Tensor slot = flat.View(3, {V, C});
  EXPECT_TRUE(ops::EmbeddingBackwardInto(slot, gd, ids, V).IsSameView(slot));
  EXPECT_EQ(slot.ToVector<double>(), want);
  EXPECT_EQ(flat.View(0, {3}).ToVector<double>(), Vec(3, -1.0));
}

TEST(NnOpsCpu, EmbeddingLargeTableFewIdsAndEmptyCases) {
  // A GPT-2-sized table with a few ids: untouched rows are exactly 0.
  const int64_t V = 50257, C = 8;
  const Tensor ids = Tensor::FromVector(std::vector<int64_t>{50256, 0, 50256, 17}, {4});
  const Tensor g = RandomTensor({4, C}, 4);
  const std::vector<float> dw = ops::EmbeddingBackward(g, ids, V).ToVector(), gv = g.ToVector();
  double nonzero_rows = 0;
  for (int64_t v = 0; v < V; ++v) {
    bool any = false;
    for (int64_t j = 0; j < C; ++j) any |= dw[v * C + j] != 0.0f;
    nonzero_rows += any;
  }
  EXPECT_EQ(nonzero_rows, 3);
  for (int64_t j = 0; j < C; ++j) {
    EXPECT_EQ(dw[50256 * C + j], static_cast<float>(static_cast<double>(gv[j]) + gv[2 * C + j]));
  }
  // No ids: an empty result, and an all-zero gradient.
  const Tensor none = Tensor::Zeros({0}, kInt64);
  EXPECT_EQ(ops::Embedding(none, RandomTensor({3, 2}, 5)).shape(), (Shape{0, 2}));
  EXPECT_EQ(ops::EmbeddingBackward(Tensor::Zeros({0, 2}), none, 3).ToVector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ops::EmbeddingBackward(Tensor::Zeros({2, 0}), Tensor::Zeros({2}, kInt64), 3).shape(), (Shape{3, 0}));
}

TEST(NnOpsCpu, EmbeddingErrorsNameTheOpOperandsAndPosition) {
  const Tensor w = Tensor::Zeros({11, 7});
  const Tensor bad = Tensor::FromVector(std::vector<int64_t>{0, 1, 2, 3, 11, 5}, {2, 3});
  ExpectTensorError([&] { ops::Embedding(bad, w); },
                    {"Embedding", "ids[1, 1] = 11", "ids [2, 3] int64 cpu", "weight", "[11, 7] float32 cpu", "[0, 11)"});
  ExpectTensorError([&] { ops::Embedding(Tensor::FromVector(std::vector<int64_t>{-1}, {1}), w); },
                    {"Embedding", "ids[0] = -1"});
  ExpectTensorError([&] { ops::EmbeddingBackward(Tensor::Zeros({2, 3, 7}), bad, 11); },
                    {"EmbeddingBackward", "ids[1, 1] = 11", "[0, 11)"});
  ExpectTensorError([&] { ops::Embedding(Tensor::Zeros({2}), w); },
                    {"Embedding(ids [2] float32 cpu, weight [11, 7] float32 cpu)", "ids must be int64"});
  ExpectTensorError([&] { ops::Embedding(bad, w.To(kBFloat16)); }, {"Embedding", "weight must be float32 or float64"});
  ExpectTensorError([&] { ops::Embedding(bad, Tensor::Zeros({7})); }, {"Embedding", "weight must have 2 dimension"});
  ExpectTensorError([&] { ops::EmbeddingBackward(Tensor::Zeros({3, 2, 7}), bad, 11); },
                    {"EmbeddingBackward(grad [3, 2, 7] float32 cpu, ids [2, 3] int64 cpu)",
                     "grad must have the shape of ids plus one last dimension"});
  ExpectTensorError([&] { ops::EmbeddingBackwardInto(Tensor::Zeros({11, 6}), Tensor::Zeros({2, 3, 7}), bad, 11); },
                    {"EmbeddingBackward", "out must be a contiguous [11, 7] float32 tensor on cpu", "[11, 6]"});
  ExpectTensorError([&] { ops::EmbeddingBackward(Tensor::Zeros({2, 3, 7}), bad, -1); }, {"num_rows must be >= 0"});
  Tensor undefined;
  ExpectTensorError([&] { ops::Embedding(undefined, w); }, {"Embedding", "ids is undefined"});
}

// ---------------------------------------------------------------- LayerNorm

TEST(NnOpsCpu, LayerNormForwardAndBackwardAgainstReference) {
  struct Case {
    Shape shape;
    double eps;
  };
  for (const Case& cs : {Case{{16, 64, 128}, 1e-5}, Case{{5, 33}, 1e-5}, Case{{1, 1}, 1e-5}, Case{{3, 70}, 0.5},
                         Case{{70, 9}, 1e-5}}) {
    const int64_t c = cs.shape.back(), rows = NumelOf(cs.shape) / c;
    // Off-centre inputs (mean 3) exercise the two-pass variance.
    const Tensor x = RandomTensor(cs.shape, 10, Device::CPU(), 2.0f, 4.0f), w = RandomTensor({c}, 11, Device::CPU(), 0.5f, 1.5f);
    const Tensor b = RandomTensor({c}, 12), g = RandomTensor(cs.shape, 13);
    const LayerNormRef ref = RefLayerNorm(AsDouble(x), AsDouble(w), AsDouble(b), AsDouble(g), rows, c, cs.eps);
    const std::string what = ShapeToString(cs.shape);
    for (DType dt : {kFloat32, kFloat64}) {
      const double tol = dt == kFloat32 ? 2e-6 : 1e-12;
      const Tensor X = x.To(dt), W = w.To(dt), B = b.To(dt), G = g.To(dt);
      ops::LayerNormResult r = ops::LayerNorm(X, W, B, cs.eps);
      ASSERT_EQ(r.y.shape(), cs.shape);
      ASSERT_EQ(r.mean.shape(), Shape(cs.shape.begin(), cs.shape.end() - 1));
      ExpectClose(r.y, ref.y, tol, what + " y " + DTypeName(dt));
      ExpectClose(r.mean, ref.mean, tol, what + " mean");
      ExpectClose(r.rstd, ref.rstd, tol, what + " rstd");
      ops::LayerNormGrads d = ops::LayerNormBackward(G, X, W, r.mean, r.rstd);
      // The gradient scale grows with rstd (up to 1/sqrt(eps) for C = 1).
      const double gtol = tol * (dt == kFloat32 ? 10 : 1);
      ExpectClose(d.dx, ref.dx, gtol * (1 + ref.rstd[0]), what + " dx " + DTypeName(dt));
      ExpectClose(d.dweight, ref.dw, gtol * std::sqrt(static_cast<double>(rows)), what + " dweight");
      ExpectClose(d.dbias, ref.db, gtol * std::sqrt(static_cast<double>(rows)), what + " dbias");
    }
  }
}

TEST(NnOpsCpu, LayerNormStridedInputsDestinationsAndEmpty) {
  const Tensor base = RandomTensor({6, 5}, 20), w = RandomTensor({6}, 21), b = RandomTensor({6}, 22);
  const Tensor xt = base.Transpose(0, 1);  // [5, 6], not contiguous
  ASSERT_FALSE(xt.is_contiguous());
  ops::LayerNormResult r1 = ops::LayerNorm(xt, w, b, 1e-5), r2 = ops::LayerNorm(xt.Contiguous(), w, b, 1e-5);
  EXPECT_EQ(r1.y.ToVector(), r2.y.ToVector());
  const Tensor g = RandomTensor({5, 6}, 23);
  Tensor flat = Tensor::Zeros({12});
  ops::LayerNormGrads d1 = ops::LayerNormBackward(g.Transpose(0, 1).Contiguous().Transpose(0, 1), xt, w, r1.mean,
                                                  r1.rstd, flat.View(0, {6}), flat.View(6, {6}));
  ops::LayerNormGrads d2 = ops::LayerNormBackward(g, xt.Contiguous(), w, r2.mean, r2.rstd);
  EXPECT_TRUE(d1.dweight.IsSameView(flat.View(0, {6})));
  EXPECT_EQ(d1.dx.ToVector(), d2.dx.ToVector());
  EXPECT_EQ(d1.dweight.ToVector(), d2.dweight.ToVector());
  EXPECT_EQ(d1.dbias.ToVector(), d2.dbias.ToVector());
  // No rows: empty outputs, zero parameter gradients.
  ops::LayerNormResult e = ops::LayerNorm(Tensor::Zeros({0, 6}), w, b, 1e-5);
  EXPECT_EQ(e.y.shape(), (Shape{0, 6}));
  ops::LayerNormGrads de = ops::LayerNormBackward(Tensor::Zeros({0, 6}), Tensor::Zeros({0, 6}), w, e.mean, e.rstd);
  EXPECT_EQ(de.dweight.ToVector(), std::vector<float>(6, 0.0f));
  // A constant row: var 0, rstd = 1/sqrt(eps), y = bias.
  ops::LayerNormResult k = ops::LayerNorm(Tensor::Full({1, 6}, 3.0f), w, b, 1e-5);
  EXPECT_EQ(k.y.ToVector(), b.ToVector());
}

TEST(NnOpsCpu, LayerNormErrorsNameTheOpAndOperands) {
  const Tensor x = Tensor::Zeros({2, 3}), w = Tensor::Zeros({3}), b = Tensor::Zeros({3});
  ExpectTensorError([&] { ops::LayerNorm(x, Tensor::Zeros({4}), b, 1e-5); },
                    {"LayerNorm(x [2, 3] float32 cpu, weight [4] float32 cpu, bias [3] float32 cpu)", "weight must be [3]"});
  ExpectTensorError([&] { ops::LayerNorm(x, w, Tensor::Zeros({2}), 1e-5); }, {"LayerNorm", "bias must be [3]"});
  ExpectTensorError([&] { ops::LayerNorm(x, w.To(kFloat64), b, 1e-5); },
                    {"LayerNorm", "weight [3] float64 cpu", "weight and bias must be float32 (x's math dtype)"});
  // bfloat16 activations take float32 parameters.
  ExpectTensorError([&] { ops::LayerNorm(x.To(kBFloat16), w.To(kBFloat16), b.To(kBFloat16), 1e-5); },
                    {"LayerNorm", "weight and bias must be float32 (x's math dtype)"});
  ExpectTensorError([&] { ops::LayerNorm(x, w, b, 1e-5, kFloat16); }, {"LayerNorm", "cannot produce float16 from float32"});
  ExpectTensorError([&] { ops::LayerNorm(x, w, b, -1.0); }, {"LayerNorm", "eps must be finite and >= 0"});
  ExpectTensorError([&] { ops::LayerNorm(Tensor::Zeros({2, 0}), Tensor::Zeros({0}), Tensor::Zeros({0}), 1e-5); },
                    {"LayerNorm", "last) dimension of x is empty"});
  ExpectTensorError([&] { ops::LayerNorm(Tensor::Scalar(1.0f), w, b, 1e-5); }, {"LayerNorm", "at least one dimension"});
  ExpectTensorError([&] { ops::LayerNormBackward(x, x, w, Tensor::Zeros({3}), Tensor::Zeros({2})); },
                    {"LayerNormBackward", "mean [3] float32 cpu", "mean and rstd must have x's shape without its last"});
  ExpectTensorError([&] { ops::LayerNormBackward(Tensor::Zeros({3, 2}), x, w, Tensor::Zeros({2}), Tensor::Zeros({2})); },
                    {"LayerNormBackward", "grad must have x's shape"});
  ExpectTensorError(
      [&] { ops::LayerNormBackward(x, x, w, Tensor::Zeros({2}), Tensor::Zeros({2}), Tensor::Zeros({2})); },
      {"LayerNormBackward", "dweight must be a contiguous [3] float32 tensor on cpu, got [2] float32 cpu"});
}

// ---------------------------------------------------------------- GELU

TEST(NnOpsCpu, GeluForwardAndBackwardAgainstReference) {
  // Normal values, both tails and the origin.
  Tensor x = RandomTensor({1000}, 30, Device::CPU(), -8.0f, 8.0f);
  std::vector<float> xv = x.ToVector();
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-4f, -1e-4f, 10.0f, -10.0f, 30.0f, -30.0f, 100.0f, -100.0f}) xv.push_back(v);
  x = Tensor::FromVector(xv, {static_cast<int64_t>(xv.size())});
  const Tensor g = RandomTensor(x.shape(), 31);
  Vec y, dx;
  const Vec xd = AsDouble(x), gd = AsDouble(g);
  for (size_t i = 0; i < xd.size(); ++i) {
    y.push_back(RefGelu(xd[i]));
    dx.push_back(gd[i] * RefGeluGrad(xd[i]));
  }
  // float32: a few ulp of the result, and absolute 1e-7 where the result
  // is tiny (torch's tanh form loses that part entirely).
  const Vec yf = AsDouble(ops::Gelu(x)), dxf = AsDouble(ops::GeluBackward(g, x));
  for (size_t i = 0; i < xd.size(); ++i) {
    EXPECT_NEAR(yf[i], y[i], 1e-7 + 4e-7 * std::fabs(y[i])) << "x = " << xd[i];
    EXPECT_NEAR(dxf[i], dx[i], 1e-7 + 2e-6 * std::fabs(dx[i])) << "x = " << xd[i];
  }
  ExpectClose(ops::Gelu(x.To(kFloat64)), y, 1e-14, "gelu f64");
  ExpectClose(ops::GeluBackward(g.To(kFloat64), x.To(kFloat64)), dx, 1e-13, "gelu backward f64");
  // The tails are exact: x for large x, 0 for very negative x.
  EXPECT_EQ(ops::Gelu(Tensor::FromVector({100.0f, -100.0f, 30.0f}, {3})).ToVector(),
            (std::vector<float>{100.0f, -0.0f, 30.0f}));
  // Strided input and empty input.
  const Tensor m = RandomTensor({4, 6}, 32);
  EXPECT_EQ(ops::Gelu(m.Transpose(0, 1)).ToVector(), ops::Gelu(m.Transpose(0, 1).Contiguous()).ToVector());
  EXPECT_EQ(ops::Gelu(Tensor::Zeros({0, 3})).shape(), (Shape{0, 3}));
  ExpectTensorError([&] { ops::GeluBackward(Tensor::Zeros({2}), Tensor::Zeros({3})); },
                    {"GeluBackward(grad [2] float32 cpu, x [3] float32 cpu)", "shapes differ"});
  ExpectTensorError([&] { ops::Gelu(Tensor::Zeros({2}, kInt64)); }, {"Gelu", "int64"});
}

// ---------------------------------------------------------------- causal softmax

TEST(NnOpsCpu, CausalSoftmaxForwardAndBackwardAgainstReference) {
  struct Case {
    Shape shape;
    double scale;
  };
  for (const Case& cs : {Case{{16, 4, 64, 64}, 1 / std::sqrt(32.0)}, Case{{1, 1}, 1.0}, Case{{3, 7, 7}, 0.3},
                         Case{{2, 33, 33}, 2.0}, Case{{5, 5}, -0.5}}) {
    const int64_t t = cs.shape.back(), rows = NumelOf(cs.shape) / t;
    const Tensor s = RandomTensor(cs.shape, 40, Device::CPU(), -4.0f, 4.0f), g = RandomTensor(cs.shape, 41);
    for (DType dt : {kFloat32, kFloat64}) {
      // float32 scales the scores in float32 (as torch does); the reference too.
      const double scale = dt == kFloat32 ? static_cast<double>(static_cast<float>(cs.scale)) : cs.scale;
      Vec p, ds;
      RefCausalSoftmax(AsDouble(s), AsDouble(g), rows, t, scale, dt == kFloat32, &p, &ds);
      const double tol = dt == kFloat32 ? 1e-6 : 1e-14;
      const std::string what = ShapeToString(cs.shape) + " " + DTypeName(dt);
      const Tensor P = ops::CausalSoftmax(s.To(dt), cs.scale);
      ExpectClose(P, p, tol, what + " probs");
      // Masked entries are exactly 0, in both directions.
      const Vec pv = AsDouble(P), dv = AsDouble(ops::CausalSoftmaxBackward(g.To(dt), P, cs.scale));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = r % t + 1; j < t; ++j) {
          ASSERT_EQ(pv[r * t + j], 0.0);
          ASSERT_EQ(dv[r * t + j], 0.0);
        }
      }
      // The backward from the kernel's own probs against the reference's.
      ExpectClose(ops::CausalSoftmaxBackward(g.To(dt), P, cs.scale), ds, tol * 4, what + " backward");
    }
  }
}

TEST(NnOpsCpu, CausalSoftmaxLargeScoresStridedAndErrors) {
  // Scores far beyond exp's range: no overflow, rows sum to 1.
  const Tensor big = RandomTensor({6, 6}, 50, Device::CPU(), -1e4f, 1e4f);
  const std::vector<float> p = ops::CausalSoftmax(big, 1.0).ToVector();
  for (int i = 0; i < 6; ++i) {
    double s = 0;
    for (int j = 0; j < 6; ++j) {
      ASSERT_TRUE(std::isfinite(p[i * 6 + j]));
      s += p[i * 6 + j];
    }
    EXPECT_NEAR(s, 1.0, 1e-6) << i;
  }
  // A transposed view of scores (the kernel gets a contiguous copy).
  const Tensor s = RandomTensor({2, 5, 5}, 51);
  EXPECT_EQ(ops::CausalSoftmax(s.Transpose(1, 2), 0.5).ToVector(),
            ops::CausalSoftmax(s.Transpose(1, 2).Contiguous(), 0.5).ToVector());
  EXPECT_EQ(ops::CausalSoftmax(Tensor::Zeros({0, 4, 4}), 1.0).shape(), (Shape{0, 4, 4}));
  ExpectTensorError([&] { ops::CausalSoftmax(Tensor::Zeros({2, 3, 4}), 1.0); },
                    {"CausalSoftmax(scores [2, 3, 4] float32 cpu)", "scores must be [..., T, T]"});
  ExpectTensorError([&] { ops::CausalSoftmax(Tensor::Zeros({4}), 1.0); }, {"CausalSoftmax", "[..., T, T]"});
  ExpectTensorError([&] { ops::CausalSoftmax(Tensor::Zeros({4, 4}), NAN); }, {"CausalSoftmax", "scale must be finite"});
  ExpectTensorError([&] { ops::CausalSoftmaxBackward(Tensor::Zeros({3, 3}), Tensor::Zeros({4, 4}), 1.0); },
                    {"CausalSoftmaxBackward(grad [3, 3] float32 cpu, probs [4, 4] float32 cpu)", "shapes differ"});
  ExpectTensorError([&] { ops::CausalSoftmaxBackward(Tensor::Zeros({4, 4}), Tensor::Zeros({4, 4}, kFloat64), 1.0); },
                    {"CausalSoftmaxBackward", "dtypes differ"});
}

// ---------------------------------------------------------------- determinism

TEST(NnOpsCpu, SameBitsEveryRun) {
  // The GPT's shapes (B=16, T=64, C=128, H=4, V=256): every op twice.
  const Tensor ids = RandomIds({16, 64}, 256, 60), wte = RandomTensor({256, 128}, 61);
  const Tensor x = RandomTensor({16, 64, 128}, 62), w = RandomTensor({128}, 63), b = RandomTensor({128}, 64);
  const Tensor h = RandomTensor({16, 64, 512}, 65, Device::CPU(), -3.0f, 3.0f), gh = RandomTensor({16, 64, 512}, 66);
  const Tensor s = RandomTensor({16, 4, 64, 64}, 67, Device::CPU(), -3.0f, 3.0f), gs = RandomTensor({16, 4, 64, 64}, 68);
  auto run = [&] {
    std::vector<std::vector<float>> out;
    out.push_back(ops::Embedding(ids, wte).ToVector());
    out.push_back(ops::EmbeddingBackward(x, ids, 256).ToVector());
    ops::LayerNormResult r = ops::LayerNorm(x, w, b, 1e-5);
    ops::LayerNormGrads d = ops::LayerNormBackward(x, x, w, r.mean, r.rstd);
    for (const Tensor& t : {r.y, r.mean, r.rstd, d.dx, d.dweight, d.dbias}) out.push_back(t.ToVector());
    out.push_back(ops::Gelu(h).ToVector());
    out.push_back(ops::GeluBackward(gh, h).ToVector());
    const Tensor p = ops::CausalSoftmax(s, 0.125);
    out.push_back(p.ToVector());
    out.push_back(ops::CausalSoftmaxBackward(gs, p, 0.125).ToVector());
    return out;
  };
  const auto first = run();
  const auto second = run();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(first[i] == second[i]) << "output " << i;
}

// ---------------------------------------------------------------- vectorized exp

TEST(NnOpsCpu, VectorizedExpIsAccurateOverTheWholeRange) {
  std::mt19937 gen(70);
  std::uniform_real_distribution<double> wide(-800, 800), narrow(-2, 2);
  auto ulps = [](double got, double want, double ulp_at) { return std::fabs(got - want) / ulp_at; };
  double worst_f = 0, worst_d = 0;
  for (int i = 0; i < 200000; ++i) {
    const double xd = i % 2 ? wide(gen) : narrow(gen);
    const float xf = static_cast<float>(xd / 9);  // float's range is about +-88
    const double wf = std::exp(static_cast<double>(xf));
    const float rf = static_cast<float>(wf);
    if (rf >= std::numeric_limits<float>::min() && std::isfinite(rf)) {
      worst_f = std::max(worst_f, ulps(cpu::Exp(xf), wf, std::nextafter(rf, INFINITY) - rf));
    }
    const long double wd = std::exp(static_cast<long double>(xd));
    const double rd = static_cast<double>(wd);
    if (rd >= std::numeric_limits<double>::min() && std::isfinite(rd)) {
      worst_d = std::max(worst_d, static_cast<double>(std::fabs(cpu::Exp(xd) - wd) / (std::nextafter(rd, INFINITY) - rd)));
    }
  }
  EXPECT_LE(worst_f, 1.5);
  EXPECT_LE(worst_d, 1.5);
  // Limits: overflow to inf, underflow to 0, NaN through, exact at 0.
  EXPECT_EQ(cpu::Exp(0.0f), 1.0f);
  EXPECT_EQ(cpu::Exp(0.0), 1.0);
  EXPECT_EQ(cpu::Exp(89.0f), INFINITY);
  EXPECT_EQ(cpu::Exp(710.0), INFINITY);
  EXPECT_EQ(cpu::Exp(INFINITY), INFINITY);
  EXPECT_EQ(cpu::Exp(-INFINITY), 0.0f);
  EXPECT_EQ(cpu::Exp(-1000.0), 0.0);
  EXPECT_TRUE(std::isnan(cpu::Exp(NAN)));
  EXPECT_TRUE(std::isnan(cpu::Exp(std::nan(""))));
  for (float x : {88.7f, -87.3f}) {  // next to the ends of float's range
    const double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(cpu::Exp(x), want, 2e-7 * want) << x;
  }
  EXPECT_NEAR(cpu::Exp(709.7), std::exp(709.7), 4e-16 * std::exp(709.7));
  EXPECT_NEAR(cpu::Exp(-708.3), std::exp(-708.3), 4e-16 * std::exp(-708.3));
}

TEST(NnOpsCpu, SumInOrderIsTheFixedEightLaneOrder) {
  // Any n, including the tail: the documented order exactly.
  for (int64_t n : {0, 1, 7, 8, 9, 31, 128}) {
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(j)] = std::ldexp(1.0 + j, static_cast<int>(j % 60) - 30);
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < n; ++j) acc[j % 8] += v[static_cast<size_t>(j)];
    const double want = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    EXPECT_EQ(cpu::SumInOrder(n, [&](int64_t j) { return v[static_cast<size_t>(j)]; }), want) << n;
    double a = -1, b = -1;
    cpu::SumInOrder2(
        n, [&](int64_t j, double* ta, double* tb) { *ta = v[static_cast<size_t>(j)]; *tb = 2 * v[static_cast<size_t>(j)]; },
        &a, &b);
    EXPECT_EQ(a, want) << n;
    EXPECT_EQ(b, 2 * want) << n;
    if (n > 0) {
      const double mx = *std::max_element(v.begin(), v.end());
      EXPECT_EQ(cpu::MaxOf<double>(n, [&](int64_t j) { return -v[static_cast<size_t>(j)]; }), -v[0]) << n;
      EXPECT_EQ(cpu::MaxOf<double>(n, [&](int64_t j) { return v[static_cast<size_t>(j)]; }), mx) << n;
    }
  }
}

}  // namespace
}  // namespace psync
