// DistributedDataParallel over real processes (forked ranks, FileStore in a
// fresh directory), on every CPU backend: Gloo over 127.0.0.1, shm
// (/dev/shm), hier (two made-up hosts: shm within, Gloo across). Every
// child is bounded: the parent SIGKILLs any rank still running at the
// deadline.
#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/str_split.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/ddp/ddp_scenario.h"
#include "worker/ddp/missing_gradient.h"
#include "worker/ddp/reducer.h"

namespace psync::ddp::testing {
namespace {

using psync::test_support::ExpectAllRanksOk;
using psync::test_support::RunRanks;
using psync::test_support::TempDir;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kDeadline(90000);

// Parameter: the process group backend every case runs on.
class DdpMultiProcess : public ::testing::TestWithParam<std::string> {
 protected:
  void RunScenario(Scenario sc, float tol = 1e-5f) {
    sc.backend = GetParam();
    TempDir dir;
    ASSERT_FALSE(dir.path().empty());
    ExpectAllRanksOk(RunRanks(
        sc.world, [&](int rank) { return RunDdpRank(sc, rank, dir.path(), tol); }, kDeadline));
  }
  std::shared_ptr<comm::ProcessGroup> Group(const std::string& dir, int rank, int world, milliseconds timeout) {
    return MakeGroup(dir, rank, world, timeout, GetParam());
  }
};

INSTANTIATE_TEST_SUITE_P(Backends, DdpMultiProcess, ::testing::Values("gloo", "shm", "hier"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---------------------------------------------------------------- equivalence

TEST_P(DdpMultiProcess, TwoRanksMatchFullBatch) {
  Scenario sc;
  sc.world = 2;
  sc.steps = 5;
  RunScenario(sc);
}

TEST_P(DdpMultiProcess, FourRanksMatchFullBatch) {
  Scenario sc;
  sc.world = 4;
  sc.steps = 4;
  RunScenario(sc);
}

TEST_P(DdpMultiProcess, DefaultCapsSingleBucketNoRebuild) {
  Scenario sc;
  sc.world = 2;
  sc.bucket_cap_mb = 25;
  sc.first_bucket_cap_mb = 1;
  sc.rebuild = RebuildMode::kNone;
  RunScenario(sc);
}

// ---------------------------------------------------------------- compression hooks

// bf16 / fp16 gradients on the wire: close to the exact result (not equal),
// and every rank still holds the same weights.
TEST_P(DdpMultiProcess, Bf16CompressionStaysCloseToFullBatch) {
  Scenario sc;
  sc.world = 4;
  sc.steps = 6;
  sc.compression = "bf16";
  RunScenario(sc, 2e-3f);
}

TEST_P(DdpMultiProcess, Fp16CompressionStaysCloseToFullBatch) {
  Scenario sc;
  sc.world = 2;
  sc.steps = 6;
  sc.micro = 2;
  sc.compression = "fp16";
  RunScenario(sc, 2e-4f);
}

// ---------------------------------------------------------------- unused parameters

TEST_P(DdpMultiProcess, LayerSkippedAlways) {
  Scenario sc;
  sc.find_unused = true;
  sc.skip = [](int, int, int) { return std::set<int>{1}; };
  RunScenario(sc);
}

TEST_P(DdpMultiProcess, LayerSkippedOnOddStepsFourRanks) {
  Scenario sc;
  sc.world = 4;
  sc.steps = 5;
  sc.find_unused = true;
  sc.skip = [](int step, int, int) { return step % 2 ? std::set<int>{1} : std::set<int>{}; };
  RunScenario(sc);
}

TEST_P(DdpMultiProcess, LayerSkippedOnOneRankOnly) {
  // Locally unused on rank 0, used on rank 1: rank 0 contributes zeros and
  // still receives the averaged gradient.
  Scenario sc;
  sc.find_unused = true;
  sc.skip = [](int step, int, int rank) { return rank == 0 && step % 2 == 0 ? std::set<int>{1} : std::set<int>{}; };
  RunScenario(sc);
}

TEST_P(DdpMultiProcess, LayerSkippedOnlyInLastMicroBatch) {
  // Used only in the no_sync micro-batches: its locally accumulated
  // gradient must still be averaged across ranks (pytorch#69031).
  Scenario sc;
  sc.micro = 3;
  sc.find_unused = true;
  sc.skip = [](int, int micro, int) { return micro == 2 ? std::set<int>{1} : std::set<int>{}; };
  RunScenario(sc);
}

TEST_P(DdpMultiProcess, LayerUsedOnlyInNoSyncOnOneRankFourRanks) {
  Scenario sc;
  sc.world = 4;
  sc.micro = 2;
  sc.find_unused = true;
  sc.skip = [](int step, int micro, int rank) {
    if (micro == 1) return std::set<int>{1};               // never in the synced micro-batch
    return (rank + step) % 2 ? std::set<int>{1} : std::set<int>{};  // used in no_sync on some ranks only
  };
  RunScenario(sc);
}

// ---------------------------------------------------------------- no_sync

TEST_P(DdpMultiProcess, NoSyncMicroBatchesMatchFullBatch) {
  Scenario sc;
  sc.micro = 4;
  sc.steps = 3;
  RunScenario(sc);
}

TEST_P(DdpMultiProcess, NoSyncZeroGradInPlace) {
  Scenario sc;
  sc.micro = 3;
  sc.alternate_zero = false;
  sc.set_to_none = false;
  sc.find_unused = true;
  sc.skip = [](int step, int micro, int) { return micro == 2 || step == 1 ? std::set<int>{1} : std::set<int>{}; };
  RunScenario(sc);
}

// ---------------------------------------------------------------- discarded outputs

TEST_P(DdpMultiProcess, DiscardedOutputThenForward) {
  Scenario sc;
  sc.discard_first_output = true;
  RunScenario(sc);
}

TEST_P(DdpMultiProcess, DiscardedOutputThenForwardWithUnusedParameters) {
  Scenario sc;
  sc.discard_first_output = true;
  sc.find_unused = true;
  sc.micro = 2;
  sc.skip = [](int step, int, int) { return step % 2 ? std::set<int>{1} : std::set<int>{}; };
  RunScenario(sc);
}

// ---------------------------------------------------------------- bucket layout

TEST_P(DdpMultiProcess, LaunchOrderAscendingWithSeveralBuckets) {
  TempDir dir;
  auto results = RunRanks(
      2,
      [&](int rank) -> int {
        auto pg = Group(dir.path(), rank, 2, milliseconds(20000));
        CHILD_CHECK(rank, pg != nullptr, "group");
        auto mlp = std::make_shared<nn::MLP>(std::vector<int64_t>{8, 16, 16, 16, 16, 4}, Device::CPU(), kSeed);
        DdpOptions opts;
        opts.bucket_caps = *BucketCaps::FromMiB(0.0003, 0.0001);
        opts.find_unused_parameters = true;
        auto ddp = DistributedDataParallel::Create(mlp, pg, opts);
        CHILD_CHECK(rank, ddp.ok(), ddp.status().ToString());
        CHILD_CHECK(rank, (*ddp)->reducer().num_buckets() >= 4, absl::StrCat((*ddp)->reducer().num_buckets()));
        auto observer = std::make_shared<OrderObserver>();
        (*ddp)->reducer().SetObserver(observer);
        for (int s = 0; s < 4; ++s) {
          auto [x, y] = StepData(s, 4, Device::CPU());
          std::set<int> skip;
          if (rank == 1 && s % 2 == 0) skip = {2};
          auto out = (*ddp)->Forward([&] { return mlp->Forward(autograd::Variable(x), skip); });
          CHILD_CHECK(rank, out.ok(), out.status().ToString());
          absl::Status st = autograd::Backward(nn::MseLoss(*out, y));
          CHILD_CHECK(rank, st.ok(), st.ToString());
          mlp->ZeroGrad();
        }
        CHILD_CHECK(rank, observer->traces.size() == 4, "4 traces");
        for (const auto& t : observer->traces) {
          for (size_t k = 0; k < t.launch_order.size(); ++k) {
            CHILD_CHECK(rank, t.launch_order[k] == k, absl::StrJoin(t.launch_order, ","));
            CHILD_CHECK(rank, t.buckets[k].launch <= t.buckets[k].complete, "launch before completion");
          }
          CHILD_CHECK(rank, t.launch_order.size() == t.buckets.size(), "every bucket launched");
          CHILD_CHECK(rank, t.first_hook <= t.first_launch && t.first_launch <= t.finalize_begin, "trace times");
        }
        CHILD_CHECK(rank, observer->traces[0].rebuilt_buckets, "rebuilt after the first iteration");
        CHILD_CHECK(rank, !observer->traces[1].rebuilt_buckets, "rebuilt once");
        return 0;
      },
      kDeadline);
  ExpectAllRanksOk(results);
}

TEST_P(DdpMultiProcess, RebuildFromObservedOrderIdenticalOnAllRanks) {
  TempDir dir;
  auto results = RunRanks(
      3,
      [&](int rank) -> int {
        auto pg = Group(dir.path(), rank, 3, milliseconds(20000));
        CHILD_CHECK(rank, pg != nullptr, "group");
        auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
        DdpOptions opts;
        opts.bucket_caps = *BucketCaps::FromMiB(0.0005, 0.0002);
        opts.find_unused_parameters = true;
        auto ddp = DistributedDataParallel::Create(mlp, pg, opts);
        CHILD_CHECK(rank, ddp.ok(), ddp.status().ToString());
        Reducer& reducer = (*ddp)->reducer();
        const BucketPlan initial = reducer.bucket_plan();
        CHILD_CHECK(rank, initial == reducer.PlanFromOrder(ReverseOrder(6)), "initial plan is reverse order");
        // Ranks observe different ready orders: rank r skips layer 1 when
        // r is odd, so its (unused) parameters are marked ready first.
        auto [x, y] = StepData(0, 4, Device::CPU());
        std::set<int> skip;
        if (rank % 2) skip = {1};
        auto out = (*ddp)->Forward([&] { return mlp->Forward(autograd::Variable(x), skip); });
        CHILD_CHECK(rank, out.ok(), out.status().ToString());
        absl::Status st = autograd::Backward(nn::MseLoss(*out, y));
        CHILD_CHECK(rank, st.ok(), st.ToString());
        const std::vector<size_t>& order = reducer.recorded_ready_order();
        CHILD_CHECK(rank, order.size() == 6, "recorded order covers all parameters");
        auto orders = pg->AllgatherBytes(absl::StrJoin(order, ","), milliseconds(20000));
        CHILD_CHECK(rank, orders.ok(), orders.status().ToString());
        CHILD_CHECK(rank, (*orders)[0] != (*orders)[1], "ranks 0 and 1 observed different orders");
        auto plans = pg->AllgatherBytes(PlanString(reducer.bucket_plan()), milliseconds(20000));
        CHILD_CHECK(rank, plans.ok(), plans.status().ToString());
        for (const auto& p : *plans) CHILD_CHECK(rank, p == (*plans)[0], "plans differ");
        // The plan is rank 0's observed order, packed with the same caps.
        std::vector<size_t> rank0;
        for (auto piece : absl::StrSplit((*orders)[0], ',')) rank0.push_back(std::stoul(std::string(piece)));
        CHILD_CHECK(rank, PlanString(reducer.bucket_plan()) == PlanString(reducer.PlanFromOrder(rank0)),
                 "plan from rank 0's order");
        // Gradients survived the rebuild: each is the view of its slot in the
        // new buckets and holds the average of every rank's local gradient
        // (an identical model without DDP gives this rank's; rank 1's has no
        // layer 1 gradient: it contributed zeros there).
        auto plain = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
        st = autograd::Backward(nn::MseLoss(plain->Forward(autograd::Variable(x), skip), y));
        CHILD_CHECK(rank, st.ok(), st.ToString());
        std::string local;
        for (const auto& p : plain->parameters()) {
          const std::vector<float> g =
              p.grad().defined() ? p.grad().ToVector() : std::vector<float>(static_cast<size_t>(p.data().numel()), 0.0f);
          local.append(reinterpret_cast<const char*>(g.data()), g.size() * sizeof(float));
        }
        auto locals = pg->AllgatherBytes(local, milliseconds(20000));
        CHILD_CHECK(rank, locals.ok(), locals.status().ToString());
        const auto params = mlp->parameters();
        size_t at = 0;
        for (size_t i = 0; i < params.size(); ++i) {
          const Tensor& grad = params[i].grad();
          CHILD_CHECK(rank, grad.defined(), params[i].name() + " lost its gradient");
          CHILD_CHECK(rank, grad.IsSameView(reducer.bucket_view(i)), params[i].name() + " is not its new slot's view");
          const std::vector<float> got = grad.ToVector();
          for (size_t j = 0; j < got.size(); ++j, ++at) {
            double sum = 0;
            for (const std::string& l : *locals) sum += reinterpret_cast<const float*>(l.data())[at];
            const double want = sum / 3.0;
            CHILD_CHECK(rank, std::fabs(got[j] - want) <= 1e-6 + 1e-5 * std::fabs(want),
                        absl::StrCat(params[i].name(), "[", j, "] = ", got[j], ", average of the ranks' ", want));
          }
        }
        return 0;
      },
      kDeadline);
  ExpectAllRanksOk(results);
}

TEST_P(DdpMultiProcess, ExternalBucketPlanAppliedAtIterationBoundary) {
  Scenario sc;
  sc.rebuild = RebuildMode::kExternal;
  sc.external_plan = [](const Reducer& r) {
    // One bucket per parameter, in registration order (not the ready order).
    BucketPlan plan;
    for (size_t i = 0; i < r.parameters().size(); ++i) plan.push_back({i});
    return plan;
  };
  RunScenario(sc);
}

// ---------------------------------------------------------------- errors

TEST_P(DdpMultiProcess, UnusedParameterWithoutFindUnusedNamesIt) {
  TempDir dir;
  auto results = RunRanks(
      2,
      [&](int rank) -> int {
        auto pg = Group(dir.path(), rank, 2, milliseconds(30000));
        CHILD_CHECK(rank, pg != nullptr, "group");
        auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
        DdpOptions opts;
        opts.timeout = milliseconds(30000);
        opts.bucket_caps = *BucketCaps::FromMiB(0.0005, 0.0002);
        auto ddp = DistributedDataParallel::Create(mlp, pg, opts);
        CHILD_CHECK(rank, ddp.ok(), ddp.status().ToString());
        optim::SGD sgd(mlp->named_parameters(), {});
        // Step 0: every layer used.
        auto [x, y] = StepData(0, 4, Device::CPU());
        auto out = (*ddp)->Forward(autograd::Variable(x));
        CHILD_CHECK(rank, out.ok(), out.status().ToString());
        CHILD_CHECK(rank, autograd::Backward(nn::MseLoss(*out, y)).ok(), "step 0");
        CHILD_CHECK(rank, sgd.Step(0.1).ok(), "sgd");
        // Step 1: rank 0 skips layer 1 without find_unused_parameters.
        std::set<int> skip;
        if (rank == 0) skip = {1};
        const auto t0 = Clock::now();
        out = (*ddp)->Forward([&] { return mlp->Forward(autograd::Variable(x), skip); });
        CHILD_CHECK(rank, out.ok(), out.status().ToString());
        absl::Status st = autograd::Backward(nn::MseLoss(*out, y));
        const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
        CHILD_CHECK(rank, !st.ok(), "backward must fail");
        const std::string msg(st.message());
        if (rank == 0) {
          CHILD_CHECK(rank, msg.find("layers.1.weight") != std::string::npos, msg);
          CHILD_CHECK(rank, msg.find("layers.1.bias") != std::string::npos, msg);
          CHILD_CHECK(rank, msg.find("layers.0.weight") == std::string::npos, msg);
          CHILD_CHECK(rank, msg.find("find_unused_parameters") != std::string::npos, msg);
          // A program built on DDP restates the advice in its own terms
          // (psync-worker: its flag); the facts and the code stay.
          const absl::Status mine = RestateMissingGradientAdvice(st, "Pass --my-flag.");
          const std::string restated(mine.message());
          CHILD_CHECK(rank, mine.code() == st.code(), mine.ToString());
          CHILD_CHECK(rank, restated.find("layers.1.weight") != std::string::npos, restated);
          CHILD_CHECK(rank, restated.find("Pass --my-flag.") != std::string::npos, restated);
          CHILD_CHECK(rank, restated.find("DdpOptions") == std::string::npos, restated);
          CHILD_CHECK(rank, RestateMissingGradientAdvice(absl::InternalError("x"), "y").message() == "x",
                      "other errors pass unchanged");
          // The next forward fails with the same named error.
          auto again = (*ddp)->Forward(autograd::Variable(x));
          CHILD_CHECK(rank, !again.ok(), "next forward must fail");
          CHILD_CHECK(rank, std::string(again.status().message()).find("layers.1.weight") != std::string::npos,
                   again.status().ToString());
          // A backward that bypasses DDP's forward does not quietly skip reduction.
          absl::Status direct = autograd::Backward(nn::MseLoss(mlp->Forward(autograd::Variable(x)), y));
          CHILD_CHECK(rank, !direct.ok(), "backward after a failure must fail");
          CHILD_CHECK(rank, std::string(direct.message()).find("layers.1.weight") != std::string::npos, direct.ToString());
        } else {
          // Rank 1 had every gradient; its bucket collective fails because
          // rank 0 aborted the group: fast (the timeout is 30 s), naming the
          // bucket and rank 0, with a code psync-worker maps to exit 4
          // (peer lost / aborted). shm carries rank 0's reason (its abort
          // word); Gloo only sees the connection close.
          CHILD_CHECK(rank, elapsed < milliseconds(15000), absl::StrCat("took ", elapsed.count(), " ms: ", msg));
          CHILD_CHECK(rank, st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kAborted,
                      st.ToString());
          CHILD_CHECK(rank, msg.find("DDP: reducing bucket ") != std::string::npos, msg);
          CHILD_CHECK(rank, msg.find("(rank 1, iteration 1)") != std::string::npos, msg);
          CHILD_CHECK(rank, msg.find("peer rank 0") != std::string::npos, msg);
          if (GetParam() == "shm") {
            CHILD_CHECK(rank, msg.find("layers.1.weight") != std::string::npos, msg);
            CHILD_CHECK(rank, msg.find("got no gradient on rank 0") != std::string::npos, msg);
          }
          // Sticky on this side too.
          auto again = (*ddp)->Forward(autograd::Variable(x));
          CHILD_CHECK(rank, !again.ok() && again.status().message() == st.message(), again.status().ToString());
        }
        return 0;
      },
      kDeadline);
  ExpectAllRanksOk(results);
}

// ---------------------------------------------------------------- a rank out of step

// Ranks train iterations 0..5 declaring each iteration. In iteration 2
// one rank either skips its backward (`skip`: rank 1 then reduces iteration
// 3 against rank 0's iteration 2) or runs an extra forward + backward
// (rank 0: its extra backward pairs with rank 1's iteration 3). The bucket
// collectives alone would pair up silently; the step check must fail the
// mismatched backward on every rank within seconds (the collective timeout
// is 30 s), naming the rank out of step and both iterations, with Aborted
// (psync-worker: exit 4), and no gradient of it applied. `compression`:
// none = the tags ride in bucket 0; bf16 = the check's own allreduce.
void OutOfStep(const std::string& backend, bool skip, const std::string& compression = "none") {
  TempDir dir;
  constexpr milliseconds kTimeout(30000);
  const int odd_rank = skip ? 1 : 0;
  auto results = RunRanks(
      2,
      [&](int rank) -> int {
        auto pg = MakeGroup(dir.path(), rank, 2, kTimeout, backend);
        CHILD_CHECK(rank, pg != nullptr, "group");
        auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
        DdpOptions opts;
        opts.timeout = kTimeout;
        opts.bucket_caps = *BucketCaps::FromMiB(0.0005, 0.0002);
        auto hook = CommHookFromFlag(compression);
        CHILD_CHECK(rank, hook.ok(), hook.status().ToString());
        opts.comm_hook = *hook;
        auto ddp = DistributedDataParallel::Create(mlp, pg, opts);
        CHILD_CHECK(rank, ddp.ok(), ddp.status().ToString());
        optim::SGD sgd(mlp->named_parameters(), {});
        absl::Status failed;
        int failed_in = -1;
        std::vector<std::vector<float>> before;
        Clock::time_point t0;
        for (int s = 0; s < 6 && failed.ok(); ++s) {
          (*ddp)->reducer().DeclareIteration(s);
          auto [x, y] = StepData(s, 4, Device::CPU());
          const int passes = !skip && rank == odd_rank && s == 2 ? 2 : 1;
          before.clear();
          for (const auto& p : mlp->parameters()) before.push_back(p.data().ToVector());
          for (int pass = 0; pass < passes && failed.ok(); ++pass) {
            auto out = (*ddp)->Forward(autograd::Variable(x));
            CHILD_CHECK(rank, out.ok(), out.status().ToString());
            if (skip && rank == odd_rank && s == 2) break;  // forward, then no backward
            t0 = Clock::now();
            failed = autograd::Backward(nn::MseLoss(*out, y));
            failed_in = s;
          }
          if (!failed.ok()) break;
          CHILD_CHECK(rank, sgd.Step(0.1).ok(), "sgd");
          sgd.ZeroGrad();
        }
        const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
        std::fprintf(stderr, "rank %d, iteration %d, after %lld ms: %s\n", rank, failed_in,
                     static_cast<long long>(elapsed.count()), failed.ToString().c_str());
        CHILD_CHECK(rank, !failed.ok(), "a backward must fail");
        // The mismatched backward is the first one after iteration 2 began.
        CHILD_CHECK(rank, failed_in == (rank == 1 ? 3 : 2), absl::StrCat("failed in iteration ", failed_in));
        CHILD_CHECK(rank, failed.code() == absl::StatusCode::kAborted, failed.ToString());
        const std::string msg(failed.message());
        const std::string want = absl::StrCat("DDP: rank ", odd_rank,
                                              " is out of step: rank 0 at iteration 2, rank 1 at iteration 3");
        CHILD_CHECK(rank, msg.find(want) != std::string::npos, msg);
        // Skip: iteration 2 never paired; extra: rank 0's first backward of 2 did.
        const std::string agreed = absl::StrCat("the last iteration every rank reduced together was ", skip ? 1 : 2);
        CHILD_CHECK(rank, msg.find(agreed) != std::string::npos, msg);
        CHILD_CHECK(rank, msg.find(absl::StrCat("seen on rank ", rank, " of 2")) != std::string::npos, msg);
        CHILD_CHECK(rank, elapsed < milliseconds(10000), absl::StrCat("took ", elapsed.count(), " ms"));
        // Nothing of the mismatched backward reached the weights, and the
        // reducer stays failed with the same explanation.
        const auto params = mlp->parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          CHILD_CHECK(rank, params[i].data().ToVector() == before[i], params[i].name());
        }
        auto again = (*ddp)->Forward(autograd::Variable(StepData(0, 4, Device::CPU()).first));
        CHILD_CHECK(rank, !again.ok() && std::string(again.status().message()).find(want) != std::string::npos,
                    again.status().ToString());
        return 0;
      },
      kDeadline);
  ExpectAllRanksOk(results);
}

TEST_P(DdpMultiProcess, RankSkippingABackwardIsNamedOnEveryRank) { OutOfStep(GetParam(), /*skip=*/true); }
TEST_P(DdpMultiProcess, RankRunningAnExtraBackwardIsNamedOnEveryRank) { OutOfStep(GetParam(), /*skip=*/false); }
TEST_P(DdpMultiProcess, RankSkippingABackwardIsNamedWithACompressionHook) { OutOfStep(GetParam(), true, "bf16"); }
TEST_P(DdpMultiProcess, RankRunningAnExtraBackwardIsNamedWithACompressionHook) { OutOfStep(GetParam(), false, "bf16"); }

TEST_P(DdpMultiProcess, UnfinishedBackwardFailsNextForward) {
  // World 1 (no peers to wait for): a backward that stops midway (a node
  // throws) leaves reduction unfinished; the next forward names the
  // parameters that got no gradient.
  TempDir dir;
  auto results = RunRanks(
      1,
      [&](int rank) -> int {
        auto pg = Group(dir.path(), rank, 1, milliseconds(10000));
        CHILD_CHECK(rank, pg != nullptr, "group");
        auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
        DdpOptions opts;
        opts.bucket_caps = *BucketCaps::FromMiB(0.0005, 0.0002);
        auto ddp = DistributedDataParallel::Create(mlp, pg, opts);
        CHILD_CHECK(rank, ddp.ok(), ddp.status().ToString());
        auto [x, y] = StepData(0, 4, Device::CPU());
        auto out = (*ddp)->Forward(autograd::Variable(x));
        CHILD_CHECK(rank, out.ok(), out.status().ToString());
        // Make the first layer's weight accumulator fail: its hook runs after
        // the last layer's, so reduction is half done when backward stops.
        auto acc = mlp->parameters()[0].grad_accumulator();
        const int id = acc->AddPreHook([](const autograd::TensorList&) -> autograd::TensorList {
          throw TensorError("injected failure");
        });
        absl::Status st = autograd::Backward(nn::MseLoss(*out, y));
        acc->RemovePreHook(id);
        CHILD_CHECK(rank, !st.ok(), "backward must fail");
        auto again = (*ddp)->Forward(autograd::Variable(x));
        CHILD_CHECK(rank, !again.ok(), "next forward must fail");
        const std::string msg(again.status().message());
        CHILD_CHECK(rank, msg.find("layers.0.weight") != std::string::npos, msg);
        CHILD_CHECK(rank, msg.find("layers.2.weight") == std::string::npos, msg);
        CHILD_CHECK(rank, msg.find("find_unused_parameters") != std::string::npos, msg);
        return 0;
      },
      kDeadline);
  ExpectAllRanksOk(results);
}

TEST_P(DdpMultiProcess, PeerKilledDuringCollectiveFailsWithinTimeout) {
  TempDir dir;
  constexpr milliseconds kTimeout(5000);
  auto results = RunRanks(
      2,
      [&](int rank) -> int {
        auto pg = Group(dir.path(), rank, 2, kTimeout);
        CHILD_CHECK(rank, pg != nullptr, "group");
        auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
        DdpOptions opts;
        opts.timeout = kTimeout;
        auto ddp = DistributedDataParallel::Create(mlp, pg, opts);
        CHILD_CHECK(rank, ddp.ok(), ddp.status().ToString());
        auto [x, y] = StepData(0, 4, Device::CPU());
        for (int s = 0; s < 2; ++s) {
          auto out = (*ddp)->Forward(autograd::Variable(x));
          CHILD_CHECK(rank, out.ok(), out.status().ToString());
          if (rank == 1 && s == 1) raise(SIGKILL);  // dies before its half of the collective
          const auto t0 = Clock::now();
          absl::Status st = autograd::Backward(nn::MseLoss(*out, y));
          const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
          if (s == 0) {
            CHILD_CHECK(rank, st.ok(), st.ToString());
            continue;
          }
          CHILD_CHECK(rank, !st.ok(), "backward must fail when the peer is gone");
          CHILD_CHECK(rank, elapsed < kTimeout + milliseconds(3000),
                   absl::StrCat("took ", elapsed.count(), " ms: ", st.ToString()));
          std::fprintf(stderr, "rank 0 got (after %lld ms): %s\n", static_cast<long long>(elapsed.count()),
                       st.ToString().c_str());
          // And the reducer stays failed.
          CHILD_CHECK(rank, !(*ddp)->Forward(autograd::Variable(x)).ok(), "sticky error");
        }
        return 0;
      },
      kDeadline);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].code, 0);
  EXPECT_EQ(results[1].code, -SIGKILL);
}

}  // namespace
}  // namespace psync::ddp::testing
