// DistributedDataParallel::Rejoin, the worker side of live recovery (issue
// 32): three ranks train; the last one is killed inside a step; the two
// survivors' backward fails, they form a new process group in-process, call
// Rejoin and compute the interrupted step again with the same global batch
// (each share grows: --accumulate goes from 2 to 3), then train on. Their
// weights equal one process on the full batch (ddp_scenario.h's reference)
// to float32 round-off, and each other bit for bit. Over gloo, shm and hier.
#include <gtest/gtest.h>

#include <signal.h>

#include <optional>
#include <set>
#include <string>

#include "psync/common/status_macros.h"
#include "tests/common/process_event.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/ddp/ddp_scenario.h"

namespace psync::ddp::testing {
namespace {

using std::chrono::milliseconds;
using test_support::ProcessEvent;
using test_support::RunRanks;
using test_support::TempDir;

// The job: W=3 ranks x M=2 micro-batches x B=4 rows = 24 rows per step; the
// last rank dies in step kLostStep, before its synchronised backward. The
// survivors then split the same 24 rows as W=2 x M=3 x B=4.
constexpr int kWorld = 3, kMicro = 2, kRows = 4, kSteps = 6, kLostStep = 3;
constexpr int kSurvivorMicro = kWorld * kMicro / (kWorld - 1);

Scenario Job(const std::string& backend, bool find_unused) {
  Scenario sc;
  sc.world = kWorld;
  sc.micro = kMicro;
  sc.rows = kRows;
  sc.steps = kSteps;
  sc.backend = backend;
  sc.find_unused = find_unused;
  sc.alternate_zero = false;
  // With find_unused: layer 1 unused by every rank on odd steps, so the
  // (rebuilt) allreduce unused source is exercised before and after.
  if (find_unused) sc.skip = [](int step, int, int) { return step % 2 == 1 ? std::set<int>{1} : std::set<int>{}; };
  return sc;
}

// One step of this rank's share: `micro` micro-batches of kRows rows, the
// last one synchronised. `die_before_sync`: the rank is killed right before
// its synchronised backward (the survivors are then inside theirs).
absl::Status Step(DistributedDataParallel& ddp, nn::MLP& mlp, const Scenario& sc, int step, int rank, int micro,
                  ProcessEvent* die_before_sync) {
  ddp.reducer().DeclareIteration(step);
  const int64_t n = static_cast<int64_t>(kWorld) * kMicro * kRows;
  auto [x, y] = StepData(step, n, sc.device);
  for (int m = 0; m < micro; ++m) {
    std::optional<NoSync> guard;
    if (m + 1 < micro) guard.emplace(ddp.NoSync());
    const int64_t first = (static_cast<int64_t>(rank) * micro + m) * kRows;
    autograd::Variable xin(Rows(x, first, kRows));
    const std::set<int> skip = sc.skip(step, m, rank);
    absl::StatusOr<autograd::Variable> out = ddp.Forward([&] { return mlp.Forward(xin, skip); });
    if (!out.ok()) return out.status();
    if (die_before_sync != nullptr && m + 1 == micro) {
      die_before_sync->Wait(milliseconds(20000));  // the survivors are in their synchronised backward
      raise(SIGKILL);
    }
    autograd::Variable loss = autograd::Scale(nn::MseLoss(*out, Rows(y, first, kRows)), 1.0f / static_cast<float>(micro));
    PSYNC_RETURN_IF_ERROR(autograd::Backward(loss));
  }
  return absl::OkStatus();
}

int RunRank(const Scenario& sc, int rank, const std::string& dir, ProcessEvent& survivors_in_backward) {
  std::shared_ptr<comm::ProcessGroup> pg = MakeGroup(dir, rank, kWorld, milliseconds(5000), sc.backend, "e0");
  CHILD_CHECK(rank, pg != nullptr, "group of epoch 0");
  auto mlp = std::make_shared<nn::MLP>(Widths(), sc.device, kSeed + static_cast<uint64_t>(rank));
  DdpOptions opts;
  opts.bucket_caps = *BucketCaps::FromMiB(sc.bucket_cap_mb, sc.first_bucket_cap_mb);
  opts.find_unused_parameters = sc.find_unused;
  opts.timeout = milliseconds(20000);
  auto ddp_or = DistributedDataParallel::Create(mlp, pg, opts);
  CHILD_CHECK(rank, ddp_or.ok(), ddp_or.status().ToString());
  auto ddp = std::move(*ddp_or);
  optim::SGD sgd(mlp->named_parameters(), {});
  int world = kWorld, micro = kMicro;
  for (int s = 0; s < kSteps; ++s) {
    const bool lost_here = s == kLostStep && world == kWorld;
    ProcessEvent* die = lost_here && rank == kWorld - 1 ? &survivors_in_backward : nullptr;
    if (lost_here && rank < kWorld - 1) {
      // Tell the doomed rank we are about to enter the synchronised
      // backward; it dies right after, while we wait on it in bucket 0.
      survivors_in_backward.Notify();
    }
    absl::Status st = Step(*ddp, *mlp, sc, s, rank, micro, die);
    if (lost_here) {
      CHILD_CHECK(rank, !st.ok(), absl::StrCat("step ", s, " must fail: rank ", kWorld - 1, " died in it"));
      std::fprintf(stderr, "rank %d (%s): step %d failed as it must: %s\n", rank, sc.backend.c_str(), s,
                   st.ToString().c_str());
      // The new membership: the survivors keep their ranks; the same global
      // batch, each share larger (--accumulate adapts).
      world = kWorld - 1;
      micro = kSurvivorMicro;
      pg.reset();  // the reducer and the wrapper still hold it until Rejoin
      std::shared_ptr<comm::ProcessGroup> next = MakeGroup(dir, rank, world, milliseconds(20000), sc.backend, "e1");
      CHILD_CHECK(rank, next != nullptr, "group of epoch 1");
      st = ddp->Rejoin(next);
      CHILD_CHECK(rank, st.ok(), st.ToString());
      CHILD_CHECK(rank, ddp->group().size() == world, "the wrapper's group is the new one");
      pg = next;
      st = Step(*ddp, *mlp, sc, s, rank, micro, nullptr);  // the interrupted step, again
    }
    CHILD_CHECK(rank, st.ok(), absl::StrCat("step ", s, ": ", st.ToString()));
    st = sgd.Step(sc.lr);
    CHILD_CHECK(rank, st.ok(), st.ToString());
    sgd.ZeroGrad(sc.set_to_none);
  }
  float worst = 0;
  return CheckWeights(rank, *mlp, RunReference(sc), *pg, 1e-5f, &worst);
}

class DdpRejoin : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(DdpRejoin, SurvivorsRecomputeTheLostStepAndMatchOneProcess) {
  const auto& [backend, find_unused] = GetParam();
  const Scenario sc = Job(backend, find_unused);
  TempDir dir;
  ProcessEvent survivors_in_backward;
  auto results =
      RunRanks(kWorld, [&](int rank) { return RunRank(sc, rank, dir.path(), survivors_in_backward); },
               std::chrono::seconds(120));
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  for (int r = 0; r < kWorld - 1; ++r) EXPECT_TRUE(results[static_cast<size_t>(r)].ok()) << "survivor rank " << r;
  EXPECT_EQ(results.back().code, -SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Backends, DdpRejoin,
                         ::testing::Combine(::testing::Values("gloo", "shm", "hier"), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_FindUnused" : "");
                         });

// --zero keeps a rank's optimizer shard only there: Rejoin refuses, and
// says to resume from a checkpoint.
TEST(DdpRejoinZero, RefusedNamingTheCheckpoint) {
  TempDir dir;
  auto results = RunRanks(
      1,
      [&](int rank) -> int {
        std::shared_ptr<comm::ProcessGroup> pg = MakeGroup(dir.path(), rank, 1, milliseconds(5000), "gloo", "z0");
        CHILD_CHECK(rank, pg != nullptr, "group");
        auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
        DdpOptions opts;
        opts.zero_stage = 1;
        auto ddp = DistributedDataParallel::Create(mlp, pg, opts);
        CHILD_CHECK(rank, ddp.ok(), ddp.status().ToString());
        absl::Status st = (*ddp)->Rejoin(MakeGroup(dir.path(), rank, 1, milliseconds(5000), "gloo", "z1"));
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kFailedPrecondition, st.ToString());
        CHILD_CHECK(rank, st.message().find("resume from a checkpoint") != absl::string_view::npos, st.ToString());
        return 0;
      },
      std::chrono::seconds(60));
  test_support::ExpectAllRanksOk(results);
}

}  // namespace
}  // namespace psync::ddp::testing
