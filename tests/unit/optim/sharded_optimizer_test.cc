// ShardedOptimizer in one process (a world of one, the layout given by a
// fake GradientShards): the same update as the whole-parameter AdamW / SGD,
// bit for bit, on every kind of parameter (one that skips steps, one never
// used), the same checkpoint state under the same names, a state loaded
// before Attach, clipping, and refusals that name the entry. The
// multi-rank behaviour (reduce-scatter, all-gather, resharding) is tested
// in tests/unit/ddp/zero_test.cc.
#include <gtest/gtest.h>

#include "tests/unit/optim/optim_test_util.h"
#include "worker/comm/gloo/gloo_group.h"
#include "worker/comm/hash_store.h"
#include "psync/optim/adamw.h"
#include "psync/optim/sgd.h"
#include "worker/optim/sharded_optimizer.h"
#include "psync/optim/update_rule.h"

namespace psync::optim::testing {
namespace {

// Buckets of two parameters each (padded to 64 elements), world 1: this
// rank owns everything. The gradients are copied into the flat buckets
// (what the reduce-scatter leaves there) before each step.
class FakeShards : public GradientShards {
 public:
  explicit FakeShards(const NamedParams& params) {
    for (const auto& [name, p] : params) params_.push_back(p);
    for (size_t i = 0; i < params_.size(); i += 2) {
      FlatBucket b;
      int64_t n = 0;
      for (size_t k = i; k < std::min(params_.size(), i + 2); ++k) {
        b.params.push_back(k);
        b.offsets.push_back(n);
        n += params_[k].data().numel();
      }
      b.padded = (n + 63) / 64 * 64;
      // The values move into a flat buffer of the bucket's layout, as the
      // data-parallel layer's (the optimizer updates its shard in place).
      Tensor values = Tensor::Zeros({b.padded});
      for (size_t k = 0; k < b.params.size(); ++k) {
        const autograd::Variable& p = params_[b.params[k]];
        Tensor view = values.View(b.offsets[k], p.data().shape());
        ops::Copy(view, p.data());
        p.mutable_data() = view;
      }
      plan_.buckets.push_back(b);
      grads_.push_back(Tensor::Zeros({b.padded}));
      values_.push_back(values);
    }
    auto pg = comm::GlooGroup::Create(std::make_shared<comm::HashStore>(), 0, 1);
    EXPECT_TRUE(pg.ok()) << pg.status();
    group_ = std::move(*pg);
  }
  // What a backward leaves: the grads in the buckets, who got one.
  void Backward() {
    used_.assign(params_.size(), 0);
    for (size_t b = 0; b < plan_.buckets.size(); ++b) {
      const FlatBucket& fb = plan_.buckets[b];
      for (size_t k = 0; k < fb.params.size(); ++k) {
        const autograd::Variable& p = params_[fb.params[k]];
        if (!p.grad().defined()) continue;
        used_[fb.params[k]] = 1;
        ops::Copy(grads_[b].View(fb.offsets[k], p.data().shape()), p.grad());
      }
    }
  }
  const std::vector<autograd::Variable>& parameters() const override { return params_; }
  const ShardPlan& plan() const override { return plan_; }
  uint64_t version() const override { return 1; }
  Tensor GradShard(size_t b) const override { return grads_[b]; }
  bool HasGrad(size_t i) const override { return used_[i] != 0; }
  void GatherParameters(size_t) override {}
  absl::Status WaitParameters() override { return absl::OkStatus(); }
  bool ParametersWhole() const override { return true; }
  Tensor ParamBuffer(size_t b) const override { return values_[b]; }
  Tensor OwnParamShard(size_t b) const override { return values_[b]; }  // world 1: every value
  comm::ProcessGroup& group() const override { return *group_; }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(5000); }

 private:
  std::vector<autograd::Variable> params_;
  ShardPlan plan_;
  std::vector<Tensor> grads_;
  std::vector<Tensor> values_;  // per bucket: the parameters' values, flat
  std::vector<uint8_t> used_;
  std::unique_ptr<comm::ProcessGroup> group_;
};

// Steps [first, last) through the fake shards (grads -> clip -> step).
void TrainSharded(ShardedOptimizer& opt, FakeShards& shards, const RunConfig& c, int first, int last) {
  absl::StatusOr<LrSchedule> sched = LrSchedule::Create(c.schedule, c.lr, c.warmup, c.steps);
  ASSERT_TRUE(sched.ok());
  for (int s = first; s < last; ++s) {
    SetGrads(opt.params(), s, Device::CPU());
    shards.Backward();
    if (c.clip > 0) ASSERT_TRUE(opt.ClipGradNorm(c.clip).ok());
    ASSERT_TRUE(opt.Step(sched->At(s)).ok());
    opt.ZeroGrad();
  }
}

std::unique_ptr<ShardedOptimizer> MakeSharded(const NamedParams& params, const std::string& algo,
                                              const OptimizerOptions& o) {
  auto rule = UpdateRules().Create(algo, o);
  EXPECT_TRUE(rule.ok()) << rule.status();
  auto opt = ShardedOptimizer::Create(params, std::move(*rule));
  EXPECT_TRUE(opt.ok()) << opt.status();
  return std::move(*opt);
}

void ExpectSameBits(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].first, b[k].first);
    const Diff d = Compare(a[k].second, b[k].second);
    EXPECT_EQ(d.bits_differ, 0) << a[k].first << " max " << d.max_abs;
  }
}

TEST(ShardedOptimizer, SameBitsAsTheWholeParameterOptimizers) {
  for (const std::string algo : {"adamw", "sgd"}) {
    OptimizerOptions o;
    o.weight_decay = 0.05;
    o.momentum = algo == "sgd" ? 0.9 : 0.0;
    NamedParams whole = MakeParams(), sharded = MakeParams();
    std::unique_ptr<Optimizer> ref;
    if (algo == "adamw") {
      ref = std::make_unique<AdamW>(whole, o);
    } else {
      ref = std::make_unique<SGD>(whole, o);
    }
    auto opt = MakeSharded(sharded, algo, o);
    FakeShards shards(sharded);
    ASSERT_TRUE(opt->Attach(std::shared_ptr<GradientShards>(&shards, [](GradientShards*) {})).ok());
    RunConfig c;
    c.schedule = "cosine";
    c.warmup = 3;
    Train(*ref, c, 0, c.steps, Device::CPU());
    TrainSharded(*opt, shards, c, 0, c.steps);
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_EQ(Compare(whole[i].second.data(), sharded[i].second.data()).bits_differ, 0) << algo << " " << whole[i].first;
      EXPECT_EQ(ref->step_count(i), opt->step_count(i)) << whole[i].first;
    }
    absl::StatusOr<NamedTensors> state = opt->CheckpointState();
    ASSERT_TRUE(state.ok()) << state.status();
    ExpectSameBits(ref->State(), *state);
    EXPECT_EQ(opt->name(), ref->name());
    EXPECT_LT(opt->state_bytes(), ref->state_bytes() + 64 * 8 * 4) << "only padding more";
  }
}

TEST(ShardedOptimizer, ClippingMatchesWithinRoundOff) {
  NamedParams whole = MakeParams(), sharded = MakeParams();
  OptimizerOptions o;
  AdamW ref(whole, o);
  auto opt = MakeSharded(sharded, "adamw", o);
  FakeShards shards(sharded);
  ASSERT_TRUE(opt->Attach(std::shared_ptr<GradientShards>(&shards, [](GradientShards*) {})).ok());
  RunConfig c;
  c.clip = 1.0;
  Train(ref, c, 0, c.steps, Device::CPU());
  TrainSharded(*opt, shards, c, 0, c.steps);
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_LE(Compare(whole[i].second.data(), sharded[i].second.data()).max_abs, 1e-6) << whole[i].first;
  }
}

// A state loaded before Attach (--resume runs before the job is joined)
// continues exactly like the whole-parameter optimizer resumed from it.
TEST(ShardedOptimizer, ResumesFromAWholeStateLoadedBeforeAttach) {
  NamedParams whole = MakeParams(), sharded = MakeParams();
  OptimizerOptions o;
  o.weight_decay = 0.1;
  AdamW ref(whole, o);
  RunConfig c;
  Train(ref, c, 0, 10, Device::CPU());
  NamedTensors saved;
  for (const auto& [k, t] : ref.State()) saved.emplace_back(k, t.Clone());
  for (size_t i = 0; i < whole.size(); ++i) ops::Copy(sharded[i].second.mutable_data(), whole[i].second.data());
  auto opt = MakeSharded(sharded, "adamw", o);
  ASSERT_TRUE(opt->LoadCheckpointState(saved).ok());
  FakeShards shards(sharded);
  ASSERT_TRUE(opt->Attach(std::shared_ptr<GradientShards>(&shards, [](GradientShards*) {})).ok());
  Train(ref, c, 10, c.steps, Device::CPU());
  TrainSharded(*opt, shards, c, 10, c.steps);
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(Compare(whole[i].second.data(), sharded[i].second.data()).bits_differ, 0) << whole[i].first;
  }
}

TEST(ShardedOptimizer, RefusalsNameTheProblem) {
  NamedParams params = MakeParams();
  auto opt = MakeSharded(params, "adamw", {});
  EXPECT_EQ(opt->Step(1e-3).code(), absl::StatusCode::kFailedPrecondition);  // not attached
  AdamW ref(MakeParams(), {});
  NamedTensors state = ref.State();
  state.erase(state.begin() + 1);  // w2d.exp_avg
  absl::Status st = opt->LoadCheckpointState(state);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("'w2d.exp_avg' is missing"), std::string::npos) << st;
  NamedParams others = MakeParams();
  FakeShards wrong(others);
  st = opt->Attach(std::shared_ptr<GradientShards>(&wrong, [](GradientShards*) {}));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("'w2d'"), std::string::npos) << st;
  EXPECT_EQ(UpdateRules().Create("adam", {}).status().code(), absl::StatusCode::kInvalidArgument);
  OptimizerOptions bad;
  bad.beta1 = 1.0;
  EXPECT_NE(std::string(UpdateRules().Create("adamw", bad).status().message()).find("--beta1"), std::string::npos);
}

}  // namespace
}  // namespace psync::optim::testing
