// worker/optim on the CPU: the contract's semantics (unused parameters,
// decay only on >= 2-D parameters), exact state round trips, clipping,
// schedules, the registry and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "tests/unit/optim/optim_test_util.h"
#include "psync/optim/adamw.h"
#include "psync/optim/clip.h"
#include "psync/optim/registry.h"
#include "psync/optim/schedule.h"
#include "psync/optim/sgd.h"
#include "worker/safetensors/safetensors.h"
#include "worker/tensor/ops/reduce_kernels.h"

namespace psync::optim {
namespace {

using testing::Compare;
using testing::MakeParams;
using testing::RunConfig;

size_t IndexOf(const Optimizer& opt, const std::string& name) {
  for (size_t i = 0; i < opt.params().size(); ++i) {
    if (opt.params()[i].first == name) return i;
  }
  ADD_FAILURE() << "no parameter " << name;
  return 0;
}

Tensor StateEntry(const Optimizer& opt, const std::string& name) {
  for (const auto& [n, t] : opt.State()) {
    if (n == name) return t;
  }
  ADD_FAILURE() << "no state entry " << name;
  return Tensor();
}

OptimizerOptions AdamWOptions(double wd = 0.1) {
  OptimizerOptions o;
  o.weight_decay = wd;
  return o;
}

std::unique_ptr<Optimizer> Make(const std::string& name, const OptimizerOptions& o, Device d = Device::CPU()) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizers().Create(name, {MakeParams(d), o});
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? std::move(*opt) : nullptr;
}

// ---------------------------------------------------------------- AdamW semantics

TEST(AdamW, ParameterWithoutGradIsUntouchedAndItsStepDoesNotAdvance) {
  std::unique_ptr<Optimizer> opt = Make("adamw", AdamWOptions(0.5));  // decay alone would move "never"
  const size_t never = IndexOf(*opt, "never"), sometimes = IndexOf(*opt, "sometimes");
  const Tensor never0 = opt->params()[never].second.data().Clone();
  RunConfig c;
  c.steps = 7;
  for (int s = 0; s < c.steps; ++s) {
    const Tensor before = opt->params()[sometimes].second.data().Clone();
    const Tensor m_before = StateEntry(*opt, "sometimes.exp_avg").Clone();
    const Tensor v_before = StateEntry(*opt, "sometimes.exp_avg_sq").Clone();
    testing::Train(*opt, c, s, s + 1, Device::CPU());
    if (!testing::HasGrad("sometimes", s)) {
      EXPECT_EQ(Compare(opt->params()[sometimes].second.data(), before).bits_differ, 0) << "step " << s;
      EXPECT_EQ(Compare(StateEntry(*opt, "sometimes.exp_avg"), m_before).bits_differ, 0) << "step " << s;
      EXPECT_EQ(Compare(StateEntry(*opt, "sometimes.exp_avg_sq"), v_before).bits_differ, 0) << "step " << s;
    } else {
      EXPECT_GT(Compare(opt->params()[sometimes].second.data(), before).bits_differ, 0) << "step " << s;
    }
  }
  // Steps 1 and 4 had no grad: 5 of 7 steps counted (bias correction uses 5).
  EXPECT_EQ(opt->step_count(sometimes), 5);
  EXPECT_EQ(StateEntry(*opt, "sometimes.step").Item<int64_t>(), 5);
  EXPECT_EQ(opt->step_count(never), 0);
  EXPECT_EQ(opt->step_count(IndexOf(*opt, "w2d")), 7);
  EXPECT_EQ(Compare(opt->params()[never].second.data(), never0).bits_differ, 0);
  for (float v : StateEntry(*opt, "never.exp_avg").ToVector()) EXPECT_EQ(v, 0.0f);
  for (float v : StateEntry(*opt, "never.exp_avg_sq").ToVector()) EXPECT_EQ(v, 0.0f);
}

TEST(AdamW, SkippedStepsUseTheParametersOwnStepForBiasCorrection) {
  // One parameter stepped at global steps 0 and 2 must equal a parameter
  // stepped twice in a row with the same grads: its own count is 1, then 2.
  auto param = [](const std::string& name) {
    return autograd::Variable(Tensor::FromVector(std::vector<float>{0.5f, -0.25f, 1.0f}, {3}), true, name);
  };
  autograd::Variable a = param("a"), b = param("b");
  AdamW skipping({{"a", a}}, AdamWOptions()), dense({{"b", b}}, AdamWOptions());
  const Tensor g1 = Tensor::FromVector(std::vector<float>{0.1f, 0.2f, -0.3f}, {3});
  const Tensor g2 = Tensor::FromVector(std::vector<float>{-0.4f, 0.05f, 0.6f}, {3});
  a.set_grad(g1);
  ASSERT_TRUE(skipping.Step(1e-2).ok());
  a.set_grad(Tensor());
  ASSERT_TRUE(skipping.Step(1e-2).ok());
  a.set_grad(g2);
  ASSERT_TRUE(skipping.Step(1e-2).ok());
  b.set_grad(g1);
  ASSERT_TRUE(dense.Step(1e-2).ok());
  b.set_grad(g2);
  ASSERT_TRUE(dense.Step(1e-2).ok());
  EXPECT_EQ(a.data().ToVector(), b.data().ToVector());
  EXPECT_EQ(skipping.step_count(0), 2);
}

TEST(AdamW, WeightDecayOnlyForParametersWithTwoOrMoreDimensions) {
  // With zero grads the Adam term is 0 / (0 + eps) = 0, so only the decay
  // p *= 1 - lr*wd can move a parameter.
  const double lr = 0.01, wd = 0.3;
  std::unique_ptr<Optimizer> opt = Make("adamw", AdamWOptions(wd));
  std::vector<Tensor> before;
  for (const auto& [name, p] : opt->params()) {
    before.push_back(p.data().Clone());
    p.set_grad(Tensor::Zeros(p.data().shape()));
  }
  ASSERT_TRUE(opt->Step(lr).ok());
  const float factor = static_cast<float>(1 - lr * wd);
  for (size_t i = 0; i < opt->params().size(); ++i) {
    const auto& [name, p] = opt->params()[i];
    const std::vector<float> now = p.data().ToVector(), was = before[i].ToVector();
    const bool decays = p.data().dim() >= 2;
    EXPECT_EQ(static_cast<AdamW&>(*opt).decays(i), decays) << name;
    for (size_t j = 0; j < now.size(); ++j) {
      EXPECT_EQ(now[j], decays ? was[j] * factor : was[j]) << name << "[" << j << "]";
    }
  }
}

TEST(AdamW, OneStepMatchesTheFormulaInDouble) {
  const double lr = 0.02, wd = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8;
  autograd::Variable w(testing::MakeParams()[0].second.data().Clone(), true, "w");
  AdamW opt({{"w", w}}, AdamWOptions(wd));
  const std::vector<float> p0 = w.data().ToVector();
  std::vector<float> g(p0.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(static_cast<int>(i % 17) - 8);
  double m[2048] = {}, v[2048] = {};
  std::vector<double> p(p0.begin(), p0.end());
  for (int step = 1; step <= 3; ++step) {
    w.set_grad(Tensor::FromVector(g, w.data().shape()));
    ASSERT_TRUE(opt.Step(lr).ok());
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(b1, step));
      const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, step)) + eps;
      p[i] -= lr * mhat / denom;
    }
  }
  const std::vector<float> got = w.data().ToVector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], p[i], 1e-6 * (1 + std::fabs(p[i]))) << i;
}

TEST(AdamW, GradIsOnlyReadAndParameterUpdatedInPlace) {
  std::unique_ptr<Optimizer> opt = Make("adamw", AdamWOptions());
  testing::SetGrads(opt->params(), 0, Device::CPU());
  const auto& [name, p] = opt->params()[0];
  const Tensor data = p.data(), grad = p.grad();
  const Tensor grad_copy = grad.Clone();
  ASSERT_TRUE(opt->Step(1e-3).ok());
  EXPECT_TRUE(p.data().IsSameView(data));
  EXPECT_TRUE(p.grad().IsSameView(grad));
  EXPECT_EQ(Compare(grad, grad_copy).bits_differ, 0);
}

TEST(AdamW, GradWithAnotherShapeIsAnErrorNamingTheParameter) {
  std::unique_ptr<Optimizer> opt = Make("adamw", AdamWOptions());
  opt->params()[1].second.set_grad(Tensor::Zeros({5}));
  absl::Status st = opt->Step(1e-3);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "'b1d'")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "AdamWUpdate")) << st;
}

// ---------------------------------------------------------------- SGD semantics

TEST(Sgd, FirstStepSetsTheBufferAndLaterStepsRunTheMomentum) {
  OptimizerOptions o;
  o.momentum = 0.9;
  autograd::Variable w(Tensor::FromVector(std::vector<float>{1.0f, -2.0f}, {2}), true, "w");
  SGD sgd({{"w", w}}, o);
  w.set_grad(Tensor::FromVector(std::vector<float>{0.5f, 0.25f}, {2}));
  ASSERT_TRUE(sgd.Step(0.1).ok());
  EXPECT_EQ(StateEntry(sgd, "w.momentum_buffer").ToVector(), (std::vector<float>{0.5f, 0.25f}));
  ASSERT_TRUE(sgd.Step(0.1).ok());
  EXPECT_EQ(StateEntry(sgd, "w.momentum_buffer").ToVector(),
            (std::vector<float>{0.5f * 0.9f + 0.5f, 0.25f * 0.9f + 0.25f}));
  EXPECT_EQ(sgd.step_count(0), 2);
}

// ---------------------------------------------------------------- state

// Runs `total` steps uninterrupted, and k steps + State() -> safetensors
// bytes -> fresh optimizer (parameters restored too) -> LoadState -> the
// rest; both must end with the same bits.
void ExpectExactResume(const std::string& name, const OptimizerOptions& o, int k) {
  RunConfig c;
  c.steps = 15;
  c.schedule = "cosine";
  c.warmup = 2;
  c.clip = 5.0;
  std::unique_ptr<Optimizer> straight = Make(name, o);
  testing::Train(*straight, c, 0, c.steps, Device::CPU());

  std::unique_ptr<Optimizer> first = Make(name, o);
  testing::Train(*first, c, 0, k, Device::CPU());
  NamedTensors saved = first->State();
  for (const auto& [n, p] : first->params()) saved.emplace_back("param." + n, p.data());
  absl::StatusOr<std::string> bytes = safetensors::Serialize(saved);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  first.reset();

  absl::StatusOr<NamedTensors> loaded = safetensors::Parse(*bytes, "resume");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  NamedTensors state;
  std::unique_ptr<Optimizer> resumed = Make(name, o);
  for (auto& [n, t] : *loaded) {
    if (absl::StartsWith(n, "param.")) {
      ops::Copy(resumed->params()[IndexOf(*resumed, n.substr(6))].second.data(), t);
    } else {
      state.emplace_back(n, t);
    }
  }
  ASSERT_TRUE(resumed->LoadState(state).ok());
  testing::Train(*resumed, c, k, c.steps, Device::CPU());

  const NamedTensors a = testing::Snapshot(*straight), b = testing::Snapshot(*resumed);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(Compare(a[i].second, b[i].second).bits_differ, 0) << a[i].first;
  }
}

TEST(OptimizerState, AdamWResumesBitForBit) { ExpectExactResume("adamw", AdamWOptions(), 7); }

TEST(OptimizerState, SgdWithMomentumResumesBitForBit) {
  OptimizerOptions o;
  o.momentum = 0.9;
  o.weight_decay = 1e-3;
  ExpectExactResume("sgd", o, 4);
}

TEST(OptimizerState, NamesShapesAndDTypes) {
  std::unique_ptr<Optimizer> opt = Make("adamw", AdamWOptions());
  const NamedTensors st = opt->State();
  ASSERT_EQ(st.size(), 3 * opt->params().size());
  EXPECT_EQ(st[0].first, "w2d.step");
  EXPECT_EQ(st[0].second.dtype(), kInt64);
  EXPECT_EQ(st[0].second.shape(), Shape{});
  EXPECT_EQ(st[1].first, "w2d.exp_avg");
  EXPECT_EQ(st[1].second.shape(), (Shape{16, 33}));
  EXPECT_EQ(st[2].first, "w2d.exp_avg_sq");
  std::unique_ptr<Optimizer> sgd = Make("sgd", OptimizerOptions{});
  EXPECT_EQ(sgd->State().size(), sgd->params().size());  // no momentum: step counts only
}

TEST(OptimizerState, BadStateIsRefusedAndChangesNothing) {
  std::unique_ptr<Optimizer> opt = Make("adamw", AdamWOptions());
  testing::Train(*opt, RunConfig{}, 0, 2, Device::CPU());
  const NamedTensors before = testing::Snapshot(*opt);
  NamedTensors good;
  for (const auto& [n, t] : opt->State()) good.emplace_back(n, Tensor::Full(t.shape(), 7.0, t.dtype()));

  auto expect_refused = [&](NamedTensors st, const std::string& needle) {
    absl::Status s = opt->LoadState(st);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_TRUE(absl::StrContains(s.message(), needle)) << s;
    const NamedTensors after = testing::Snapshot(*opt);
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_EQ(Compare(before[i].second, after[i].second).bits_differ, 0) << before[i].first << " after " << needle;
    }
  };
  NamedTensors missing = good;
  missing.pop_back();
  expect_refused(missing, "'tail.exp_avg_sq' is missing");
  NamedTensors misshaped = good;
  misshaped[1].second = Tensor::Zeros({33, 16});
  expect_refused(misshaped, "'w2d.exp_avg' is [33, 16] float32, expected [16, 33] float32");
  NamedTensors wrong_dtype = good;
  wrong_dtype[0].second = Tensor::Full({}, 3.0, kFloat32);
  expect_refused(wrong_dtype, "'w2d.step' is [] float32, expected [] int64");
  NamedTensors extra = good;
  extra.emplace_back("w4d.exp_avg", Tensor::Zeros({1}));
  expect_refused(extra, "unexpected entry 'w4d.exp_avg'");
  NamedTensors twice = good;
  twice.push_back(good[0]);
  expect_refused(twice, "'w2d.step' appears twice");
  NamedTensors negative = good;
  negative[0].second = Tensor::FromVector(std::vector<int64_t>{-1}, {});
  expect_refused(negative, "'w2d.step' is negative");

  ASSERT_TRUE(opt->LoadState(good).ok());
  EXPECT_EQ(opt->step_count(0), 7);
  for (float v : StateEntry(*opt, "w2d.exp_avg").ToVector()) EXPECT_EQ(v, 7.0f);
}

// ---------------------------------------------------------------- registry

TEST(OptimizerRegistry, KnowsSgdAndAdamW) {
  EXPECT_EQ(Optimizers().Names(), (std::vector<std::string>{"sgd", "adamw"}));
  EXPECT_EQ(Make("sgd", OptimizerOptions{})->name(), "sgd");
  EXPECT_EQ(Make("adamw", OptimizerOptions{})->name(), "adamw");
  absl::StatusOr<std::unique_ptr<Optimizer>> bad = Optimizers().Create("adam", {MakeParams(), {}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "unknown optimizer 'adam' (known: sgd, adamw)"))
      << bad.status();
}

TEST(OptimizerRegistry, BadOptionsNameTheFlag) {
  auto error = [](const std::string& name, OptimizerOptions o) {
    return std::string(Optimizers().Create(name, {MakeParams(), o}).status().message());
  };
  OptimizerOptions o;
  o.beta1 = 1.0;
  EXPECT_TRUE(absl::StrContains(error("adamw", o), "--beta1 must be in [0, 1), got 1"));
  o = {};
  o.beta2 = -0.1;
  EXPECT_TRUE(absl::StrContains(error("adamw", o), "--beta2"));
  o = {};
  o.eps = -1;
  EXPECT_TRUE(absl::StrContains(error("adamw", o), "--eps"));
  o = {};
  o.weight_decay = -1;
  EXPECT_TRUE(absl::StrContains(error("adamw", o), "--weight-decay"));
  EXPECT_TRUE(absl::StrContains(error("sgd", o), "--weight-decay"));
  o = {};
  o.momentum = std::nan("");
  EXPECT_TRUE(absl::StrContains(error("sgd", o), "--momentum"));
}

TEST(OptimizerRegistry, BadParametersAreNamed) {
  auto error = [](NamedParams params) {
    return std::string(Optimizers().Create("adamw", {std::move(params), {}}).status().message());
  };
  NamedParams p = MakeParams();
  p.push_back(p[0]);
  EXPECT_TRUE(absl::StrContains(error(p), "parameter 'w2d' (index 8) is listed twice")) << error(p);
  p = MakeParams();
  p[2].second = autograd::Variable(Tensor::FromVector(std::vector<int64_t>{1, 2}, {2}), true, "w3d");
  EXPECT_TRUE(absl::StrContains(error(p), "parameter 'w3d' (index 2) is int64")) << error(p);
  p = MakeParams();
  p[3].second = autograd::Variable(Tensor::Zeros({2}), /*requires_grad=*/false, "big");
  EXPECT_TRUE(absl::StrContains(error(p), "'big' (index 3) is not a leaf that requires grad")) << error(p);
}

// ---------------------------------------------------------------- clipping

// Grads as views into one flat buffer, like DDP's buckets.
struct Bucketed {
  NamedParams params = MakeParams();
  Tensor flat;
  explicit Bucketed(float scale) {
    int64_t total = 0;
    for (const auto& [n, p] : params) total += p.data().numel();
    flat = Tensor::FromVector(testing::Uniform(total, 99, scale), {total});
    int64_t off = 0;
    for (const auto& [n, p] : params) {
      if (n != "never") p.set_grad(flat.View(off, p.data().shape()));
      off += p.data().numel();
    }
  }
  double NaiveNorm() const {
    double s = 0;
    for (const auto& [n, p] : params) {
      if (!p.grad().defined()) continue;
      for (float v : p.grad().ToVector()) s += static_cast<double>(v) * v;
    }
    return std::sqrt(s);
  }
};

TEST(ClipGradNorm, ScalesEveryGradInPlaceKeepingBucketViews) {
  Bucketed b(1.0f);
  std::vector<Tensor> views;
  for (const auto& [n, p] : b.params) views.push_back(p.grad());
  const std::vector<float> before = b.flat.ToVector();
  const double naive = b.NaiveNorm();
  absl::StatusOr<double> norm = ClipGradNorm(b.params, 1.0);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_NEAR(*norm, naive, 1e-12 * naive);
  const float coef = static_cast<float>(1.0 / (*norm + 1e-6));
  int64_t off = 0;
  const std::vector<float> after = b.flat.ToVector();
  for (size_t i = 0; i < b.params.size(); ++i) {
    const auto& [n, p] = b.params[i];
    const int64_t numel = p.data().numel();
    if (n != "never") {
      EXPECT_TRUE(p.grad().IsSameView(views[i])) << n;
      for (int64_t j = off; j < off + numel; ++j) EXPECT_EQ(after[j], before[j] * coef) << n;
    } else {
      for (int64_t j = off; j < off + numel; ++j) EXPECT_EQ(after[j], before[j]) << "no grad, not scaled";
    }
    off += numel;
  }
  absl::StatusOr<double> clipped = GradNorm(b.params);
  ASSERT_TRUE(clipped.ok());
  EXPECT_NEAR(*clipped, 1.0, 1e-5);
}

TEST(ClipGradNorm, BelowTheThresholdNothingChanges) {
  Bucketed b(1e-3f);
  const std::vector<float> before = b.flat.ToVector();
  absl::StatusOr<double> norm = ClipGradNorm(b.params, 1.0);
  ASSERT_TRUE(norm.ok());
  EXPECT_LT(*norm, 1.0);
  EXPECT_EQ(b.flat.ToVector(), before);
}

TEST(ClipGradNorm, NoGradsGiveZeroAndBadThresholdsAreRefused) {
  NamedParams p = MakeParams();
  absl::StatusOr<double> norm = ClipGradNorm(p, 1.0);
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(*norm, 0.0);
  for (double bad : {0.0, -1.0, std::nan(""), static_cast<double>(INFINITY)}) {
    absl::StatusOr<double> r = ClipGradNorm(p, bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "--clip-grad-norm")) << r.status();
  }
}

// ---------------------------------------------------------------- SumOfSquares

// The documented order (ops/reduce_kernels.h), written out plainly.
double SquaresInDocumentedOrder(const std::vector<float>& x) {
  std::vector<double> lane(ops::kSquaresLanes, 0.0);
  for (size_t i = 0; i < x.size(); ++i) lane[i % ops::kSquaresLanes] += static_cast<double>(x[i]) * x[i];
  std::vector<double> block(ops::kSquaresBlocks);
  for (int b = 0; b < ops::kSquaresBlocks; ++b) {
    double* t = lane.data() + b * ops::kSquaresBlockLanes;
    for (int s = ops::kSquaresBlockLanes / 2; s > 0; s >>= 1) {
      for (int j = 0; j < s; ++j) t[j] += t[j + s];
    }
    block[b] = t[0];
  }
  for (int s = ops::kSquaresBlocks / 2; s > 0; s >>= 1) {
    for (int j = 0; j < s; ++j) block[j] += block[j + s];
  }
  return block[0];
}

TEST(SumOfSquares, FollowsTheDocumentedOrderExactly) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{255}, int64_t{300}, int64_t{ops::kSquaresLanes},
                    int64_t{3 * ops::kSquaresLanes + 12345}}) {
    const std::vector<float> x = testing::Uniform(n, static_cast<uint32_t>(n) + 3, 10.0f);
    const double got = ops::SumOfSquares(Tensor::FromVector(x, {n})).Item<double>();
    const double want = SquaresInDocumentedOrder(x);
    EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "n=" << n << ": " << got << " vs " << want;
  }
}

TEST(SumOfSquares, IntoOneSlotOfABuffer) {
  Tensor slots = Tensor::Zeros({3}, kFloat64);
  ops::SumOfSquaresInto(slots.View(1, {}), Tensor::FromVector({3.0f, 4.0f}, {2}));
  EXPECT_EQ(slots.ToVector<double>(), (std::vector<double>{0, 25, 0}));
  EXPECT_THROW(ops::SumOfSquaresInto(Tensor::Zeros({}), Tensor::Zeros({2})), TensorError);  // float32 out
}

// ---------------------------------------------------------------- schedules

TEST(LrSchedule, ConstantWithWarmup) {
  absl::StatusOr<LrSchedule> s = LrSchedule::Create("constant", 0.5, 4, 10);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->At(0), 0.5 * 1 / 4);
  EXPECT_EQ(s->At(1), 0.5 * 2 / 4);
  EXPECT_EQ(s->At(3), 0.5);
  EXPECT_EQ(s->At(4), 0.5);
  EXPECT_EQ(s->At(9), 0.5);
  absl::StatusOr<LrSchedule> plain = LrSchedule::Create("constant", 0.5, 0, 10);
  EXPECT_EQ(plain->At(0), 0.5);
}

TEST(LrSchedule, CosineAsTheIssueWritesIt) {
  const double lr = 6e-4, pi = 3.141592653589793;
  const int64_t W = 3, K = 13;
  absl::StatusOr<LrSchedule> s = LrSchedule::Create("cosine", lr, W, K);
  ASSERT_TRUE(s.ok());
  for (int64_t step = 0; step < K; ++step) {
    double want;
    if (step < W) {
      want = lr * static_cast<double>(step + 1) / static_cast<double>(W);
    } else {
      const double lr_min = 0.1 * lr;
      want = lr_min +
             0.5 * (1 + std::cos(pi * static_cast<double>(step - W) / static_cast<double>(std::max<int64_t>(1, K - W)))) *
                 (lr - lr_min);
    }
    EXPECT_EQ(s->At(step), want) << step;
  }
  EXPECT_DOUBLE_EQ(s->At(W), lr);  // the peak right after warmup (lr_min + (lr - lr_min))
  EXPECT_NEAR(s->At(K - 1), 0.1 * lr + 0.5 * (1 + std::cos(pi * 9 / 10)) * 0.9 * lr, 1e-18);
  EXPECT_DOUBLE_EQ(s->At(K + 5), 0.1 * lr);  // past the end: lr_min
  absl::StatusOr<LrSchedule> all_warmup = LrSchedule::Create("cosine", lr, K, K);  // max(1, K - W)
  EXPECT_EQ(all_warmup->At(K - 1), lr);
}

TEST(LrSchedule, BadArgumentsNameTheFlag) {
  EXPECT_TRUE(absl::StrContains(LrSchedule::Create("linear", 1, 0, 1).status().message(), "--lr-schedule"));
  EXPECT_TRUE(absl::StrContains(LrSchedule::Create("cosine", -1, 0, 1).status().message(), "--lr"));
  EXPECT_TRUE(absl::StrContains(LrSchedule::Create("cosine", 1, -1, 1).status().message(), "--warmup-steps"));
  EXPECT_TRUE(absl::StrContains(LrSchedule::Create("cosine", 1, 0, 0).status().message(), "--steps"));
}

// ---------------------------------------------------------------- ZeroGrad

TEST(Optimizer, ZeroGradKeepsViewsOrDropsThem) {
  Bucketed b(1.0f);
  SGD sgd(b.params, OptimizerOptions{});
  const Tensor view = b.params[0].second.grad();
  sgd.ZeroGrad(/*set_to_none=*/false);
  EXPECT_TRUE(b.params[0].second.grad().IsSameView(view));
  for (const auto& [n, p] : b.params) {
    if (!p.grad().defined()) continue;
    for (float v : p.grad().ToVector()) EXPECT_EQ(v, 0.0f) << n;
  }
  sgd.ZeroGrad();
  EXPECT_FALSE(b.params[0].second.grad().defined());
}

}  // namespace
}  // namespace psync::optim
