// Reducer mechanics in one process (a Gloo group of world 1): gradients as
// bucket views, copy-in, no_sync accumulation, unused parameters, plans.
#include <gtest/gtest.h>

#include "tests/unit/ddp/ddp_scenario.h"
#include "worker/comm/hash_store.h"
#include "worker/ddp/reducer.h"

namespace psync::ddp::testing {
namespace {

using std::chrono::milliseconds;

struct Fixture {
  std::shared_ptr<nn::MLP> mlp;
  std::unique_ptr<DistributedDataParallel> ddp;
};

Fixture Make(bool find_unused, double cap_mb = 0.0005) {
  auto store = std::make_shared<comm::HashStore>();
  comm::GroupOptions go;
  go.timeout = milliseconds(10000);
  go.prefix = "t";
  auto pg = comm::CreateProcessGroup("gloo", store, 0, 1, go);
  EXPECT_TRUE(pg.ok()) << pg.status();
  Fixture f;
  f.mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
  DdpOptions opts;
  opts.bucket_caps = *BucketCaps::FromMiB(cap_mb, cap_mb / 2);
  opts.find_unused_parameters = find_unused;
  auto ddp = DistributedDataParallel::Create(f.mlp, std::shared_ptr<comm::ProcessGroup>(std::move(*pg)), opts);
  EXPECT_TRUE(ddp.ok()) << ddp.status();
  f.ddp = std::move(*ddp);
  return f;
}

absl::Status Step(Fixture& f, const std::set<int>& skip = {}, int data = 0) {
  auto [x, y] = StepData(data, 4, Device::CPU());
  auto out = f.ddp->Forward([&] { return f.mlp->Forward(autograd::Variable(x), skip); });
  if (!out.ok()) return out.status();
  return autograd::Backward(nn::MseLoss(*out, y));
}

bool IsBucketView(const Fixture& f, size_t i) {
  const Tensor g = f.mlp->parameters()[i].grad();
  return g.defined() && g.IsSameView(f.ddp->reducer().bucket_view(i));
}

TEST(Reducer, GradientsAreBucketViewsAndAccumulateInPlace) {
  Fixture f = Make(false);
  ASSERT_GE(f.ddp->reducer().num_buckets(), 3u);
  ASSERT_TRUE(Step(f).ok());
  std::vector<std::vector<float>> first;
  const auto all = f.mlp->parameters();
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& p = all[i];
    ASSERT_TRUE(p.grad().defined()) << p.name();
    EXPECT_TRUE(IsBucketView(f, i)) << p.name();
    first.push_back(p.grad().ToVector());
  }
  // Without zeroing, the second backward accumulates into the same views.
  std::vector<Tensor> views;
  for (const auto& p : f.mlp->parameters()) views.push_back(p.grad());
  ASSERT_TRUE(Step(f).ok());
  const auto params = f.mlp->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(params[i].grad().IsSameView(views[i])) << params[i].name();
    std::vector<float> now = params[i].grad().ToVector();
    for (size_t j = 0; j < now.size(); ++j) EXPECT_NEAR(now[j], 2 * first[i][j], 1e-6) << params[i].name();
  }
  // set_to_none: the next backward copies the fresh gradient back in.
  f.mlp->ZeroGrad(true);
  ASSERT_TRUE(Step(f).ok());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(IsBucketView(f, i)) << params[i].name();
    std::vector<float> now = params[i].grad().ToVector();
    for (size_t j = 0; j < now.size(); ++j) EXPECT_NEAR(now[j], first[i][j], 1e-6);
  }
}

TEST(Reducer, NoSyncAccumulatesLocallyThenReduces) {
  Fixture f = Make(false);
  {
    NoSync guard = f.ddp->NoSync();
    EXPECT_FALSE(f.ddp->reducer().sync_enabled());
    ASSERT_TRUE(Step(f, {}, 0).ok());
    ASSERT_TRUE(Step(f, {}, 1).ok());
  }
  EXPECT_TRUE(f.ddp->reducer().sync_enabled());
  EXPECT_EQ(f.ddp->reducer().iteration(), 0);  // no synced backward yet
  ASSERT_TRUE(Step(f, {}, 2).ok());
  EXPECT_EQ(f.ddp->reducer().iteration(), 1);
  EXPECT_TRUE(f.ddp->reducer().last_iteration_trace().synced);
  // Reference: the same three backwards without DDP.
  auto ref = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
  for (int d = 0; d < 3; ++d) {
    auto [x, y] = StepData(d, 4, Device::CPU());
    ASSERT_TRUE(autograd::Backward(nn::MseLoss(ref->Forward(autograd::Variable(x)), y)).ok());
  }
  const auto got = f.mlp->parameters(), want = ref->parameters();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(ops::MaxAbsDiff(got[i].grad(), want[i].grad()), 1e-6);
}

TEST(Reducer, GloballyUnusedParametersKeepUndefinedGrad) {
  Fixture f = Make(true);
  ASSERT_TRUE(Step(f, {1}).ok());
  for (const auto& p : f.mlp->parameters()) {
    const bool skipped = p.name().rfind("layers.1.", 0) == 0;
    EXPECT_EQ(p.grad().defined(), !skipped) << p.name();
  }
  EXPECT_EQ(f.ddp->reducer().last_iteration_trace().globally_unused, 2u);
  EXPECT_EQ(f.ddp->reducer().last_iteration_trace().locally_unused, 2u);
  // Next iteration uses it again: fine.
  f.mlp->ZeroGrad(true);
  ASSERT_TRUE(Step(f).ok());
  for (const auto& p : f.mlp->parameters()) EXPECT_TRUE(p.grad().defined()) << p.name();
}

// Every parameter's gradient (zeros when undefined) after running the steps
// with the given skips on a plain MLP: with world 1, DDP's average is exactly
// this gradient.
std::vector<std::vector<float>> PlainGrads(const std::vector<std::set<int>>& steps) {
  auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
  auto [x, y] = StepData(0, 4, Device::CPU());
  for (const auto& skip : steps) {
    absl::Status st = autograd::Backward(nn::MseLoss(mlp->Forward(autograd::Variable(x), skip), y));
    EXPECT_TRUE(st.ok()) << st;
  }
  std::vector<std::vector<float>> out;
  for (const auto& p : mlp->parameters()) {
    out.push_back(p.grad().defined() ? p.grad().ToVector() : std::vector<float>(p.data().numel(), 0.0f));
  }
  return out;
}

void ExpectGradsEqual(const Fixture& f, const std::vector<std::vector<float>>& want, const std::string& what) {
  const auto params = f.mlp->parameters();
  ASSERT_EQ(params.size(), want.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    const std::vector<float> got = g.defined() ? g.ToVector() : std::vector<float>(want[i].size(), 0.0f);
    ASSERT_EQ(got.size(), want[i].size()) << params[i].name();
    for (size_t j = 0; j < got.size(); ++j) {
      ASSERT_NEAR(got[j], want[i][j], 1e-6f) << what << ": " << params[i].name() << "[" << j << "]";
    }
  }
}

TEST(Reducer, DiscardedOutputThenForward) {
  for (bool find_unused : {false, true}) {
    Fixture f = Make(find_unused);
    auto [x, y] = StepData(0, 4, Device::CPU());
    ASSERT_TRUE(f.ddp->Forward(autograd::Variable(x)).ok());  // dropped
    ASSERT_TRUE(f.ddp->Forward(autograd::Variable(x)).ok());  // dropped again
    std::set<int> skip;
    if (find_unused) skip = {1};
    ASSERT_TRUE(Step(f, skip).ok()) << find_unused;
    // The dropped forwards left no trace in the reduced gradients.
    ExpectGradsEqual(f, PlainGrads({skip}), absl::StrCat("first step, find_unused=", find_unused));
    ASSERT_TRUE(Step(f).ok()) << find_unused;
    ExpectGradsEqual(f, PlainGrads({skip, {}}), absl::StrCat("second step, find_unused=", find_unused));
  }
}

TEST(Reducer, RejectsBadParametersAndPlans) {
  auto store = std::make_shared<comm::HashStore>();
  comm::GroupOptions go;
  go.prefix = "bad";
  auto pg_or = comm::CreateProcessGroup("gloo", store, 0, 1, go);
  ASSERT_TRUE(pg_or.ok());
  std::shared_ptr<comm::ProcessGroup> pg(std::move(*pg_or));
  autograd::Variable a(Tensor::Zeros({2}), true, "a");
  autograd::Variable frozen(Tensor::Zeros({2}), false, "frozen");
  auto twice = Reducer::Create({a, a}, pg, {});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument) << twice.status();
  EXPECT_NE(std::string(twice.status().message()).find("listed twice"), std::string::npos) << twice.status();
  auto st = Reducer::Create({a, frozen}, pg, {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.status().message()).find("frozen"), std::string::npos);

  Fixture f = Make(false);
  Reducer& r = f.ddp->reducer();
  absl::Status partial = r.ApplyBucketPlan({{0, 1}});
  EXPECT_EQ(partial.code(), absl::StatusCode::kInvalidArgument) << partial;
  EXPECT_NE(std::string(partial.message()).find("is missing"), std::string::npos) << partial;
  ASSERT_TRUE(Step(f).ok());
  std::vector<std::vector<float>> before;
  for (const auto& p : f.mlp->parameters()) before.push_back(p.grad().ToVector());
  ASSERT_TRUE(r.ApplyBucketPlan({{0, 1, 2, 3, 4, 5}}).ok());
  EXPECT_EQ(r.num_buckets(), 1u);
  const auto params = f.mlp->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].grad().ToVector(), before[i]) << "grads survive a rebuild";
    EXPECT_TRUE(IsBucketView(f, i));
    EXPECT_TRUE(params[i].grad().SharesStorageWith(params[0].grad()));
  }
  f.mlp->ZeroGrad(false);
  ASSERT_TRUE(Step(f).ok());
}

TEST(Reducer, PlanAppliedBetweenForwardAndBackward) {
  Fixture f = Make(true);
  auto [x, y] = StepData(0, 4, Device::CPU());
  auto out = f.ddp->Forward([&] { return f.mlp->Forward(autograd::Variable(x), {1}); });
  ASSERT_TRUE(out.ok());
  BucketPlan plan;
  for (size_t i = 0; i < 6; ++i) plan.push_back({5 - i});
  ASSERT_TRUE(f.ddp->reducer().ApplyBucketPlan(plan).ok());
  ASSERT_TRUE(autograd::Backward(nn::MseLoss(*out, y)).ok());
  const IterationTrace& t = f.ddp->reducer().last_iteration_trace();
  EXPECT_EQ(t.launch_order.size(), 6u);
  EXPECT_EQ(t.globally_unused, 2u);
}

}  // namespace
}  // namespace psync::ddp::testing
