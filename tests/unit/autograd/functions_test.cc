// Gradient check of every differentiable function: the engine's gradients
// (float32) against central finite differences of a float64 reference
// implementation written out in this test.
#include "psync/autograd/functions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "psync/autograd/engine.h"

namespace psync::autograd {
namespace {

using Vec = std::vector<double>;

// Deterministic values in [-1, 1) away from 0 (keeps ReLU off its kink).
Vec RandomValues(int64_t n, uint64_t seed) {
  Vec out(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (double& v : out) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    double u = static_cast<double>(s >> 11) / 9007199254740992.0;  // [0,1)
    v = u < 0.5 ? -0.1 - 0.9 * (u * 2) : 0.1 + 0.9 * ((u - 0.5) * 2);
  }
  return out;
}

Tensor ToTensor(const Vec& v, const Shape& shape) {
  return Tensor::FromVector(std::vector<float>(v.begin(), v.end()), shape);
}

struct Input {
  Shape shape;
  bool requires_grad;
  Vec fixed = {};  // when set, these values (e.g. labels) instead of random ones
};

struct Case {
  std::string name;
  std::vector<Input> inputs;
  std::function<Variable(const std::vector<Variable>&)> op;
  std::function<Vec(const std::vector<Vec>&)> reference;  // float64, flattened output
};

// ---- float64 references
Vec RefMatmul(const Vec& a, const Vec& b, int m, int k, int n) {
  Vec out(static_cast<size_t>(m * n), 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) out[i * n + j] += a[i * k + p] * b[p * n + j];
  return out;
}

Vec RefLinear(const Vec& x, const Vec& w, const Vec* b, int N, int in, int out_f) {
  Vec out(static_cast<size_t>(N * out_f), 0.0);
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < out_f; ++o) {
      double acc = b ? (*b)[o] : 0.0;
      for (int p = 0; p < in; ++p) acc += x[i * in + p] * w[o * in + p];
      out[i * out_f + o] = acc;
    }
  return out;
}

Vec Elementwise(const Vec& a, const Vec& b, const std::function<double(double, double)>& f) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = f(a[i], b[i]);
  return out;
}

double RefSum(const Vec& a) {
  double s = 0;
  for (double v : a) s += v;
  return s;
}

double RefCrossEntropy(const Vec& logits, const Vec& labels, int N, int C) {
  double total = 0;
  for (int i = 0; i < N; ++i) {
    double mx = logits[i * C];
    for (int c = 1; c < C; ++c) mx = std::max(mx, logits[i * C + c]);
    double z = 0;
    for (int c = 0; c < C; ++c) z += std::exp(logits[i * C + c] - mx);
    const int label = static_cast<int>(labels[i]);
    total += -(logits[i * C + label] - mx - std::log(z));
  }
  return total / N;
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  auto matmul_ref = [](const std::vector<Vec>& in) { return RefMatmul(in[0], in[1], 3, 4, 2); };
  auto matmul_op = [](const std::vector<Variable>& v) { return Matmul(v[0], v[1]); };
  cases.push_back({"Matmul", {{{3, 4}, true}, {{4, 2}, true}}, matmul_op, matmul_ref});
  cases.push_back({"MatmulOnlyA", {{{3, 4}, true}, {{4, 2}, false}}, matmul_op, matmul_ref});
  cases.push_back({"MatmulOnlyB", {{{3, 4}, false}, {{4, 2}, true}}, matmul_op, matmul_ref});
  cases.push_back({"Linear",
                   {{{5, 3}, true}, {{4, 3}, true}, {{4}, true}},
                   [](const std::vector<Variable>& v) { return Linear(v[0], v[1], v[2]); },
                   [](const std::vector<Vec>& in) { return RefLinear(in[0], in[1], &in[2], 5, 3, 4); }});
  cases.push_back({"LinearNoBias",
                   {{{5, 3}, true}, {{4, 3}, true}},
                   [](const std::vector<Variable>& v) { return Linear(v[0], v[1], Variable()); },
                   [](const std::vector<Vec>& in) { return RefLinear(in[0], in[1], nullptr, 5, 3, 4); }});
  cases.push_back({"LinearConstantInput",
                   {{{5, 3}, false}, {{4, 3}, true}, {{4}, true}},
                   [](const std::vector<Variable>& v) { return Linear(v[0], v[1], v[2]); },
                   [](const std::vector<Vec>& in) { return RefLinear(in[0], in[1], &in[2], 5, 3, 4); }});
  cases.push_back({"LinearOnlyInput",
                   {{{5, 3}, true}, {{4, 3}, false}, {{4}, false}},
                   [](const std::vector<Variable>& v) { return Linear(v[0], v[1], v[2]); },
                   [](const std::vector<Vec>& in) { return RefLinear(in[0], in[1], &in[2], 5, 3, 4); }});
  cases.push_back({"Relu",
                   {{{3, 4}, true}},
                   [](const std::vector<Variable>& v) { return Relu(v[0]); },
                   [](const std::vector<Vec>& in) {
                     Vec out(in[0]);
                     for (double& x : out) x = x > 0 ? x : 0;
                     return out;
                   }});
  cases.push_back({"Add",
                   {{{2, 3}, true}, {{2, 3}, true}},
                   [](const std::vector<Variable>& v) { return Add(v[0], v[1]); },
                   [](const std::vector<Vec>& in) { return Elementwise(in[0], in[1], std::plus<double>()); }});
  cases.push_back({"Sub",
                   {{{2, 3}, true}, {{2, 3}, true}},
                   [](const std::vector<Variable>& v) { return Sub(v[0], v[1]); },
                   [](const std::vector<Vec>& in) { return Elementwise(in[0], in[1], std::minus<double>()); }});
  cases.push_back({"SubOnlyB",
                   {{{2, 3}, false}, {{2, 3}, true}},
                   [](const std::vector<Variable>& v) { return Sub(v[0], v[1]); },
                   [](const std::vector<Vec>& in) { return Elementwise(in[0], in[1], std::minus<double>()); }});
  cases.push_back({"Mul",
                   {{{2, 3}, true}, {{2, 3}, true}},
                   [](const std::vector<Variable>& v) { return Mul(v[0], v[1]); },
                   [](const std::vector<Vec>& in) { return Elementwise(in[0], in[1], std::multiplies<double>()); }});
  cases.push_back({"MulSameInputTwice",
                   {{{2, 3}, true}},
                   [](const std::vector<Variable>& v) { return Mul(v[0], v[0]); },
                   [](const std::vector<Vec>& in) { return Elementwise(in[0], in[0], std::multiplies<double>()); }});
  cases.push_back({"Scale",
                   {{{2, 3}, true}},
                   [](const std::vector<Variable>& v) { return Scale(v[0], -2.5f); },
                   [](const std::vector<Vec>& in) {
                     Vec out(in[0]);
                     for (double& x : out) x *= -2.5;
                     return out;
                   }});
  cases.push_back({"Sum",
                   {{{2, 3}, true}},
                   [](const std::vector<Variable>& v) { return Sum(v[0]); },
                   [](const std::vector<Vec>& in) { return Vec{RefSum(in[0])}; }});
  cases.push_back({"Mean",
                   {{{2, 3}, true}},
                   [](const std::vector<Variable>& v) { return Mean(v[0]); },
                   [](const std::vector<Vec>& in) { return Vec{RefSum(in[0]) / 6.0}; }});
  auto mse_ref = [](const std::vector<Vec>& in) {
    Vec d = Elementwise(in[0], in[1], [](double a, double b) { return (a - b) * (a - b); });
    return Vec{RefSum(d) / static_cast<double>(d.size())};
  };
  auto mse_op = [](const std::vector<Variable>& v) { return MseLoss(v[0], v[1]); };
  cases.push_back({"MseLoss", {{{4, 3}, true}, {{4, 3}, false}}, mse_op, mse_ref});
  cases.push_back({"MseLossTargetRequiresGrad", {{{4, 3}, true}, {{4, 3}, true}}, mse_op, mse_ref});
  cases.push_back({"CrossEntropyLoss",
                   {{{4, 3}, true}, {{4}, false, {2, 0, 1, 2}}},
                   [](const std::vector<Variable>& v) { return CrossEntropyLoss(v[0], v[1].data().To(kInt64)); },
                   [](const std::vector<Vec>& in) { return Vec{RefCrossEntropy(in[0], in[1], 4, 3)}; }});
  return cases;
}

// Test names and gtest's parameter printout use the case's name (the default
// printout would be the struct's bytes, heap pointers included).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class GradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(GradCheck, MatchesCentralDifferencesOfFloat64Reference) {
  const Case& c = GetParam();
  // Inputs (float32 values, and the same values in float64).
  std::vector<Vec> values;
  std::vector<Variable> vars;
  int required = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Input& in = c.inputs[i];
    Vec v = in.fixed.empty() ? RandomValues(NumelOf(in.shape), 17 + i) : in.fixed;
    // Round through float so both sides see identical inputs.
    for (double& x : v) x = static_cast<double>(static_cast<float>(x));
    values.push_back(v);
    vars.emplace_back(ToTensor(v, in.shape), in.requires_grad, "in" + std::to_string(i));
    required += in.requires_grad ? 1 : 0;
  }

  Variable out = c.op(vars);
  ASSERT_TRUE(out.requires_grad());
  ASSERT_NE(out.grad_fn(), nullptr);
  // Only inputs that require grad get an edge.
  if (c.name != "MulSameInputTwice") {
    EXPECT_EQ(static_cast<int>(out.grad_fn()->next_edges().size()), required);
  }
  EXPECT_EQ(out.grad_fn()->name().find(c.name.substr(0, 3)), 0u) << out.grad_fn()->name();

  // L = sum(out * R) with fixed random R, so every output element matters.
  const Vec ref_out = c.reference(values);
  ASSERT_EQ(static_cast<int64_t>(ref_out.size()), out.data().numel());
  const Vec r = RandomValues(out.data().numel(), 99);
  Variable weights(ToTensor(r, out.shape()), false);
  ASSERT_TRUE(Backward(Sum(Mul(out, weights))).ok());

  // The forward value too.
  std::vector<float> got_out = out.data().ToVector();
  for (size_t j = 0; j < ref_out.size(); ++j) EXPECT_NEAR(got_out[j], ref_out[j], 1e-5 + 1e-5 * std::abs(ref_out[j]));

  auto loss64 = [&](const std::vector<Vec>& in) {
    Vec o = c.reference(in);
    double l = 0;
    for (size_t j = 0; j < o.size(); ++j) l += o[j] * r[j];
    return l;
  };
  const double eps = 1e-6;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].requires_grad) {
      EXPECT_FALSE(vars[i].grad().defined()) << "input " << i;
      continue;
    }
    ASSERT_TRUE(vars[i].grad().defined()) << "input " << i;
    ASSERT_EQ(vars[i].grad().shape(), c.inputs[i].shape);
    std::vector<float> analytic = vars[i].grad().ToVector();
    for (size_t j = 0; j < values[i].size(); ++j) {
      std::vector<Vec> plus = values, minus = values;
      plus[i][j] += eps;
      minus[i][j] -= eps;
      const double numeric = (loss64(plus) - loss64(minus)) / (2 * eps);
      EXPECT_NEAR(analytic[j], numeric, 1e-4 + 1e-4 * std::abs(numeric)) << c.name << " input " << i << " element " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, GradCheck, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(Functions, NoInputRequiresGradBuildsNoGraph) {
  Variable a(Tensor::FromVector({1, 2, 3, 4}, {2, 2}));
  Variable b(Tensor::FromVector({1, 0, 0, 1}, {2, 2}));
  for (const Variable& v : {Matmul(a, b), Add(a, b), Mul(a, b), Relu(a), Sum(a), MseLoss(a, b)}) {
    EXPECT_FALSE(v.requires_grad());
    EXPECT_EQ(v.grad_fn(), nullptr);
  }
}

TEST(Functions, ShapeErrorsThrowTensorError) {
  Variable a(Tensor::Zeros({2, 3}), true);
  Variable b(Tensor::Zeros({2, 2}), true);
  EXPECT_THROW(Add(a, b), TensorError);
  EXPECT_THROW(MseLoss(a, b), TensorError);
  EXPECT_THROW(Linear(a, b, Variable()), TensorError);
  EXPECT_THROW(CrossEntropyLoss(a, Tensor::Zeros({3}, kInt64)), TensorError);  // one target per row
  EXPECT_THROW(CrossEntropyLoss(a, Tensor::Zeros({2})), TensorError);          // targets must be int64
  EXPECT_THROW(Add(a, Variable()), TensorError);
}

TEST(Functions, SavedTensorsAreReleasedAfterBackward) {
  Variable x(Tensor::FromVector({1, 2}, {2}), true, "x");
  Variable y = Relu(x);
  // The node saved y's data; after backward without retain_graph it lets go.
  const long before = y.data().storage().use_count();
  ASSERT_TRUE(Backward(Sum(y)).ok());
  EXPECT_EQ(y.data().storage().use_count(), before - 1);
  absl::Status st = Backward(Sum(y));  // new Sum node, but ReluBackward is freed
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("ReluBackward"), std::string::npos) << st;
}

}  // namespace
}  // namespace psync::autograd
