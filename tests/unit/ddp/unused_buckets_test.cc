// Plain DDP (--zero=0) with find_unused_parameters and a source that knows
// each iteration's global used set ahead (the coordinator's plan): a bucket
// whose parameters no rank used is not sent at all (unused_buckets.h), a
// bucket used on only one rank still is, and the weights stay those of the
// full batch. Observed on the process group itself: a wrapper records the
// name of every collective the reducer issues. (zero_test checks the same
// skip with ZeRO against this count.)
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tests/common/forwarding_group.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/ddp/ddp_scenario.h"
#include "worker/ddp/reducer.h"

namespace psync::ddp::testing {
namespace {

using psync::test_support::ExpectAllRanksOk;
using psync::test_support::RunRanks;
using psync::test_support::TempDir;
using std::chrono::milliseconds;

constexpr int kWorld = 2;
constexpr int kSteps = 4;

// Layer 1 (the MLP's one square layer, the only one it can skip) is
// skipped by every rank on odd steps (its bucket unused everywhere), and on
// step 2 by rank 1 only (unused there, used on rank 0).
std::set<int> Skips(int step, int rank) {
  if (step % 2 == 1 || (step == 2 && rank == 1)) return {1};
  return {};
}

// One bucket per layer (layer k's weight and bias are parameters 2k and
// 2k+1), the last layer first: bucket 1 is layer 1's.
BucketPlan LayerBuckets() { return {{4, 5}, {2, 3}, {0, 1}}; }

// Forwards every call to `inner` and records the names of the tensor
// collectives issued (any thread; read by the test between steps).
class RecordingGroup : public test_support::ForwardingGroup {
 public:
  explicit RecordingGroup(std::shared_ptr<comm::ProcessGroup> inner) : ForwardingGroup(std::move(inner)) {}
  std::shared_ptr<comm::Work> AllreduceSum(Tensor t, const std::string& name) override {
    Record(name);
    return ForwardingGroup::AllreduceSum(std::move(t), name);
  }
  std::shared_ptr<comm::Work> AllreduceAverage(Tensor t, const std::string& name) override {
    Record(name);
    return ForwardingGroup::AllreduceAverage(std::move(t), name);
  }
  std::shared_ptr<comm::Work> ReduceScatterSum(Tensor t, const std::string& name) override {
    Record(name);
    return ForwardingGroup::ReduceScatterSum(std::move(t), name);
  }
  std::shared_ptr<comm::Work> ReduceScatterAverage(Tensor t, const std::string& name) override {
    Record(name);
    return ForwardingGroup::ReduceScatterAverage(std::move(t), name);
  }
  std::shared_ptr<comm::Work> Allgather(Tensor t, const std::string& name) override {
    Record(name);
    return ForwardingGroup::Allgather(std::move(t), name);
  }
  std::shared_ptr<comm::Work> Broadcast(Tensor t, int root, const std::string& name) override {
    Record(name);
    return ForwardingGroup::Broadcast(std::move(t), root, name);
  }

  // The bucket collectives ("bucket k") issued since the last call.
  std::set<std::string> TakeBuckets() {
    std::lock_guard<std::mutex> l(mu_);
    std::set<std::string> out;
    for (const std::string& n : names_) {
      if (n.rfind("bucket ", 0) == 0) out.insert(n);
    }
    names_.clear();
    return out;
  }

 private:
  void Record(const std::string& name) {
    std::lock_guard<std::mutex> l(mu_);
    names_.push_back(name);
  }
  std::mutex mu_;
  std::vector<std::string> names_;  // guarded by mu_
};

int RunRank(const std::string& backend, int rank, const std::string& dir) {
  std::shared_ptr<comm::ProcessGroup> real = MakeGroup(dir, rank, kWorld, milliseconds(20000), backend);
  CHILD_CHECK(rank, real != nullptr, "group");
  auto group = std::make_shared<RecordingGroup>(real);
  auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed + static_cast<uint64_t>(rank));
  DdpOptions opts;
  opts.find_unused_parameters = true;
  opts.rebuild = RebuildMode::kExternal;  // LayerBuckets throughout
  opts.timeout = milliseconds(20000);
  auto ddp_or = DistributedDataParallel::Create(
      mlp, group, opts, std::make_shared<ScriptedSource>(kWorld, mlp->parameters().size(), Skips));
  CHILD_CHECK(rank, ddp_or.ok(), ddp_or.status().ToString());
  auto ddp = std::move(*ddp_or);
  absl::Status st = ddp->reducer().ApplyBucketPlan(LayerBuckets());
  CHILD_CHECK(rank, st.ok(), st.ToString());
  auto observer = std::make_shared<OrderObserver>();
  ddp->reducer().SetObserver(observer);
  optim::SGD sgd(mlp->named_parameters(), {});
  Scenario sc;  // the reference: the same data, skips and SGD on the full batch
  sc.world = kWorld;
  sc.steps = kSteps;
  sc.skip = [](int step, int, int r) { return Skips(step, r); };
  sc.alternate_zero = false;
  (void)group->TakeBuckets();  // DDP's construction (parameter broadcast)
  for (int s = 0; s < kSteps; ++s) {
    ddp->reducer().DeclareIteration(s);
    const int64_t n = static_cast<int64_t>(kWorld) * sc.rows;
    auto [x, y] = StepData(s, n, Device::CPU());
    const int64_t first = static_cast<int64_t>(rank) * sc.rows;
    autograd::Variable xin(Rows(x, first, sc.rows));
    auto out = ddp->Forward([&] { return mlp->Forward(xin, Skips(s, rank)); });
    CHILD_CHECK(rank, out.ok(), out.status().ToString());
    st = autograd::Backward(nn::MseLoss(*out, Rows(y, first, sc.rows)));
    CHILD_CHECK(rank, st.ok(), absl::StrCat("step ", s, ": ", st.ToString()));
    CHILD_CHECK(rank, observer->traces.size() == static_cast<size_t>(s + 1), "one trace per step");
    const std::set<std::string> sent = group->TakeBuckets();
    const std::set<std::string> want = s % 2 == 1 ? std::set<std::string>{"bucket 0", "bucket 2"}
                                                   : std::set<std::string>{"bucket 0", "bucket 1", "bucket 2"};
    CHILD_CHECK(rank, sent == want, absl::StrCat("step ", s, ": sent ", absl::StrJoin(sent, ", ")));
    CHILD_CHECK(rank, observer->traces.back().skipped_buckets == (s % 2 == 1 ? 1u : 0u),
                absl::StrCat("step ", s, ": trace says ", observer->traces.back().skipped_buckets, " skipped"));
    st = sgd.Step(sc.lr);
    CHILD_CHECK(rank, st.ok(), st.ToString());
    sgd.ZeroGrad(sc.set_to_none);
  }
  const std::vector<std::vector<float>> want = RunReference(sc);
  const auto params = mlp->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> got = params[i].data().ToVector();
    float diff = 0;
    for (size_t j = 0; j < got.size(); ++j) diff = std::max(diff, std::fabs(got[j] - want[i][j]));
    CHILD_CHECK(rank, diff <= 1e-5f, absl::StrCat(params[i].name(), " max abs diff ", diff));
  }
  return 0;
}

class UnusedBuckets : public ::testing::TestWithParam<std::string> {};

TEST_P(UnusedBuckets, PlainDdpSendsNoBucketThatNoRankUsed) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  ExpectAllRanksOk(RunRanks(
      kWorld, [&](int rank) { return RunRank(GetParam(), rank, dir.path()); }, std::chrono::seconds(60)));
}

INSTANTIATE_TEST_SUITE_P(Backends, UnusedBuckets, ::testing::Values("gloo", "shm"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace psync::ddp::testing
