// Live recovery with --zero (issue 32): four ranks train an MLP with AdamW
// sharded over them (ShardedOptimizer with replicas, ZeRO stage 2, or 3:
// the parameters sharded too, whose replicas are the records' own); rank 1
// is killed at one of three moments of a step; the three survivors form a
// new group in process, agree on the newest step one of them vouches for
// (what the coordinator picks), rebuild the whole state from their shards
// and the replica of rank 1's (ShardedOptimizer::Recover), build a new DDP
// (world 3, the same global batch in larger shares) and train on. Their
// weights equal one process running AdamW on the full batch, to float32
// round-off, and each other bit for bit. The moments:
//   backward     before its synchronised backward: nobody updated the step
//   mid_backward during its synchronised backward, before it has the
//                gradients of layers.0 (the last bucket): the survivors'
//                reduction of that bucket fails with its gradients computed,
//                which belong to the interrupted iteration and are dropped
//                (as the worker does) before the new DDP adopts them
//   before_step  after its backward, before its optimizer step: the
//                survivors updated their shards but its shift never came,
//                so they go back one step (their previous records)
//   after_step   right after its step (shifts and gathers in flight): the
//                survivors go on from that step or the one before, as far
//                as its data reached them (stage 3: the one before, since
//                no gather of the next forward completes without it)
//   two_lost     before its backward, and rank 2, which kept the first copy
//                of its shard, as soon as it sees the loss: the two
//                survivors rebuild rank 1's shard from the second copy
// Over gloo, shm and hier, at stages 2 and 3.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstring>
#include <optional>
#include <string>

#include "psync/common/status_macros.h"
#include "psync/optim/adamw.h"
#include "tests/common/process_event.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/ddp/ddp_scenario.h"
#include "worker/ddp/zero_buckets.h"
#include "worker/optim/sharded_optimizer.h"

namespace psync::ddp::testing {
namespace {

using std::chrono::milliseconds;
using test_support::ProcessEvent;
using test_support::RunRanks;
using test_support::TempDir;

// W=4 ranks x M=3 micro-batches x B=2 rows = 24 rows a step; after the
// loss W=3 x M=4.
constexpr int kWorld = 4, kMicro = 3, kRows = 2, kSteps = 7, kLostStep = 3, kVictim = 1;
constexpr float kLr = 0.01f;

optim::OptimizerOptions AdamOptions() {
  optim::OptimizerOptions o;
  o.weight_decay = 0.1;
  return o;
}

// One process, the full batch, AdamW: the ground truth.
std::vector<std::vector<float>> Reference() {
  auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
  optim::AdamW adamw(mlp->named_parameters(), AdamOptions());
  const int64_t n = int64_t{kWorld} * kMicro * kRows;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = StepData(s, n, Device::CPU());
    autograd::Variable loss = nn::MseLoss(mlp->Forward(autograd::Variable(x), {}), y);
    if (!autograd::Backward(loss).ok() || !adamw.Step(kLr).ok()) std::fprintf(stderr, "reference step failed\n");
    adamw.ZeroGrad(true);
  }
  std::vector<std::vector<float>> out;
  for (const auto& p : mlp->parameters()) out.push_back(p.data().ToVector());
  return out;
}

// The forward and backward of one step: `micro` micro-batches of this
// rank's share of the global batch, the last synchronised.
absl::Status ForwardBackward(DistributedDataParallel& ddp, nn::MLP& mlp, int step, int rank, int micro) {
  ddp.reducer().DeclareIteration(step);
  auto [x, y] = StepData(step, int64_t{kWorld} * kMicro * kRows, Device::CPU());
  for (int m = 0; m < micro; ++m) {
    std::optional<NoSync> guard;
    if (m + 1 < micro) guard.emplace(ddp.NoSync());
    const int64_t first = (static_cast<int64_t>(rank) * micro + m) * kRows;
    autograd::Variable xin(Rows(x, first, kRows));
    absl::StatusOr<autograd::Variable> out = ddp.Forward([&] { return mlp.Forward(xin, {}); });
    if (!out.ok()) return out.status();
    // The mean over the global batch: each micro-batch's mean over its rows, scaled.
    PSYNC_RETURN_IF_ERROR(autograd::Backward(
        autograd::Scale(nn::MseLoss(*out, Rows(y, first, kRows)), 1.0f / static_cast<float>(micro))));
  }
  return absl::OkStatus();
}

// Kills this process when the synchronised micro-batch (the `micro`-th
// backward) reaches layers.0.weight's gradient: the buckets of the layers
// after it are being reduced, its own never will be.
void KillBeforeLastBucket(nn::MLP& mlp, int micro) {
  for (const auto& [name, p] : mlp.named_parameters()) {
    if (name != "layers.0.weight") continue;
    auto seen = std::make_shared<int>(0);
    p.grad_accumulator()->AddPreHook([seen, micro](const autograd::TensorList& grads) {
      if (++*seen == micro) raise(SIGKILL);
      return grads;
    });
  }
}

struct Member {
  std::shared_ptr<comm::ProcessGroup> group;
  std::unique_ptr<DistributedDataParallel> ddp;
};

// A DDP with ZeRO-`stage` over `group`, the optimizer attached to its shards.
absl::StatusOr<Member> Build(std::shared_ptr<nn::MLP> mlp, std::shared_ptr<comm::ProcessGroup> group,
                             optim::ShardedOptimizer& opt, int stage) {
  DdpOptions opts;
  opts.bucket_caps = *BucketCaps::FromMiB(0.0005, 0.0002);
  opts.timeout = milliseconds(20000);
  opts.zero_stage = stage;
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<DistributedDataParallel> ddp,
                         DistributedDataParallel::Create(mlp, group, opts));
  PSYNC_RETURN_IF_ERROR(opt.Attach(ddp->reducer().zero_buckets()));
  return Member{std::move(group), std::move(ddp)};
}

int RunRank(const std::string& backend, const std::string& phase, int stage, int rank, const std::string& dir) {
  auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed + static_cast<uint64_t>(rank));
  auto rule = optim::UpdateRules().Create("adamw", AdamOptions());
  CHILD_CHECK(rank, rule.ok(), rule.status().ToString());
  auto made = optim::ShardedOptimizer::Create(mlp->named_parameters(), std::move(*rule));
  CHILD_CHECK(rank, made.ok(), made.status().ToString());
  optim::ShardedOptimizer& opt = **made;
  opt.EnableReplicas(1);
  opt.set_step(0);
  absl::StatusOr<Member> m = Build(mlp, MakeGroup(dir, rank, kWorld, milliseconds(5000), backend, "e0"), opt, stage);
  CHILD_CHECK(rank, m.ok(), m.status().ToString());
  int world = kWorld, micro = kMicro, me = rank;
  int64_t completed = 0;  // steps whose optimizer step returned
  for (int s = 0; s < kSteps; ++s) {
    const bool doomed = world == kWorld && rank == kVictim && s == kLostStep;
    if (doomed && (phase == "backward" || phase == "two_lost")) raise(SIGKILL);
    if (doomed && phase == "mid_backward") KillBeforeLastBucket(*mlp, micro);
    absl::Status st = ForwardBackward(*m->ddp, *mlp, s, me, micro);
    if (doomed && phase == "before_step") raise(SIGKILL);
    if (st.ok()) st = opt.Step(kLr);
    if (doomed && phase == "after_step") raise(SIGKILL);
    if (st.ok()) {
      completed = s + 1;
      continue;
    }
    CHILD_CHECK(rank, world == kWorld && s >= kLostStep, absl::StrCat("step ", s, ": ", st.ToString()));
    if (phase == "two_lost" && rank == kVictim + 1) raise(SIGKILL);  // a second loss, during the recovery
    // The newest step this rank vouches for, and the newest any survivor
    // does (the coordinator's choice: every survivor can rebuild it).
    const int64_t held = opt.LastStepWhole() ? completed : completed - 1;
    m->ddp.reset();
    m->group.reset();
    // The interrupted iteration's gradients are dropped: it is computed again
    // (WorkerRun::RejoinLive). A failed backward leaves some behind, and a
    // new DDP adopts a parameter's gradient as PyTorch's does.
    opt.ZeroGrad(/*set_to_none=*/true);
    const int lost = phase == "two_lost" ? 2 : 1;  // ranks kVictim .. kVictim + lost - 1
    world = kWorld - lost;
    micro = kWorld * kMicro / world;
    me = rank < kVictim ? rank : rank - lost;
    std::shared_ptr<comm::ProcessGroup> next = MakeGroup(dir, me, world, milliseconds(20000), backend, "e1");
    CHILD_CHECK(rank, next != nullptr, "group of epoch 1");
    std::string mine(sizeof held, '\0');
    std::memcpy(mine.data(), &held, sizeof held);
    auto all = next->AllgatherBytes(mine, milliseconds(20000));
    CHILD_CHECK(rank, all.ok(), all.status().ToString());
    int64_t start = 0;
    for (const std::string& b : *all) {
      int64_t v = 0;
      std::memcpy(&v, b.data(), sizeof v);
      start = std::max(start, v);
    }
    std::fprintf(stderr, "rank %d (%s, %s): step %d failed (%s); holds %lld, the survivors restart at %lld\n", rank,
                 backend.c_str(), phase.c_str(), s, st.ToString().c_str(), static_cast<long long>(held),
                 static_cast<long long>(start));
    st = opt.Recover(*next, start, milliseconds(20000));
    CHILD_CHECK(rank, st.ok(), st.ToString());
    m = Build(mlp, next, opt, stage);
    CHILD_CHECK(rank, m.ok(), m.status().ToString());
    completed = start;
    s = static_cast<int>(start) - 1;  // the loop computes step `start` next
  }
  CHILD_CHECK(rank, world < kWorld, "rank 1 was never lost");
  CHILD_CHECK(rank, m->ddp->reducer().WaitForParameters().ok(), "last gathers");
  float worst = 0;
  return CheckWeights(rank, *mlp, Reference(), *m->group, 1e-5f, &worst);
}

class ZeroRecovery : public ::testing::TestWithParam<std::tuple<std::string, std::string, int>> {};

TEST_P(ZeroRecovery, SurvivorsRebuildTheLostShardAndMatchOneProcess) {
  const auto& [backend, phase, stage] = GetParam();
  TempDir dir;
  auto results = RunRanks(
      kWorld, [&](int rank) { return RunRank(backend, phase, stage, rank, dir.path()); }, std::chrono::seconds(120));
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim || (phase == "two_lost" && r == kVictim + 1)) {
      EXPECT_EQ(results[static_cast<size_t>(r)].code, -SIGKILL);
    } else {
      EXPECT_TRUE(results[static_cast<size_t>(r)].ok()) << "survivor rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ZeroRecovery,
                         ::testing::Combine(::testing::Values("gloo", "shm", "hier"),
                                            ::testing::Values("backward", "mid_backward", "before_step", "after_step", "two_lost"),
                                            ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_zero" +
                                  std::to_string(std::get<2>(info.param));
                         });

}  // namespace
}  // namespace psync::ddp::testing
