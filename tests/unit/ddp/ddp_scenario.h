// Shared by the DDP tests: a training scenario (an MLP 8-16-16-4 with MSE
// loss on deterministic data) run (a) by one process over the full batch and
// (b) by W ranks under DistributedDataParallel, so the tests can compare the
// weights after K steps.
//
// Step s uses N = W * M * B rows; micro-batch m of rank r is rows
// [(r*M + m)*B, (r*M + m + 1)*B). Each rank's loss on a micro-batch is the
// mean over its rows, scaled by 1/M; DDP averages over W ranks, so the
// gradient equals 1/(W*M) * sum of the micro-batch gradients: the full-batch
// gradient. The reference runs all W*M micro-batches in one process with
// loss scale 1/(W*M), with the same layer skips, accumulating gradients.
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/common/subprocess.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "worker/comm/file_store.h"
#include "worker/comm/process_group_factory.h"
#include "worker/ddp/compression_hook.h"
#include "psync/ddp/ddp.h"
#include "psync/nn/init.h"
#include "worker/nn/models/mlp.h"
#include "psync/nn/loss.h"
#include "psync/optim/sgd.h"
#include "psync/tensor/ops.h"
#include "worker/ddp/reducer.h"

namespace psync::ddp::testing {

inline constexpr int64_t kIn = 8, kOut = 4;
inline constexpr uint64_t kSeed = 1234;

// Which MLP layers to skip for (step, micro-batch, rank).
using SkipFn = std::function<std::set<int>(int step, int micro, int rank)>;

struct Scenario {
  int world = 2;
  int micro = 1;   // M micro-batches per step; the first M-1 run under no_sync
  int steps = 4;   // K
  int rows = 4;    // B rows per micro-batch
  SkipFn skip = [](int, int, int) { return std::set<int>{}; };
  bool find_unused = false;
  bool set_to_none = true;        // ZeroGrad mode (alternated when `alternate_zero`)
  bool alternate_zero = true;
  bool discard_first_output = false;  // run a forward and drop its output before the real one
  double bucket_cap_mb = 0.0005;      // ~524 bytes: several buckets for this MLP
  double first_bucket_cap_mb = 0.0002;
  RebuildMode rebuild = RebuildMode::kBroadcastFromRank0;
  // kExternal only: plan applied after the first step.
  std::function<BucketPlan(const Reducer&)> external_plan;
  float lr = 0.1f;
  Device device = Device::CPU();
  std::string backend = "gloo";
  std::string compression = "none";  // --grad-compression: none | bf16 | fp16
};

inline std::vector<int64_t> Widths() { return {kIn, 16, 16, kOut}; }

// Inputs and targets of step `step`: [N, kIn], [N, kOut].
inline std::pair<Tensor, Tensor> StepData(int step, int64_t n, Device device) {
  nn::SplitMix64 rng(static_cast<uint64_t>(1000 + step));
  std::vector<float> x = nn::UniformValues(rng, n * kIn, -1.0f, 1.0f);
  std::vector<float> y = nn::UniformValues(rng, n * kOut, -1.0f, 1.0f);
  return {Tensor::FromVector(x, {n, kIn}, device), Tensor::FromVector(y, {n, kOut}, device)};
}

inline Tensor Rows(const Tensor& t, int64_t first, int64_t count) {
  return t.View(first * t.size(1), {count, t.size(1)});
}

// One process, full batch: the ground truth.
inline std::vector<std::vector<float>> RunReference(const Scenario& sc) {
  auto mlp = std::make_shared<nn::MLP>(Widths(), sc.device, kSeed);
  optim::SGD sgd(mlp->named_parameters(), {});
  const int64_t n = static_cast<int64_t>(sc.world) * sc.micro * sc.rows;
  const float scale = 1.0f / static_cast<float>(sc.world * sc.micro);
  for (int s = 0; s < sc.steps; ++s) {
    auto [x, y] = StepData(s, n, sc.device);
    for (int r = 0; r < sc.world; ++r) {
      for (int m = 0; m < sc.micro; ++m) {
        const int64_t first = (static_cast<int64_t>(r) * sc.micro + m) * sc.rows;
        autograd::Variable out = mlp->Forward(autograd::Variable(Rows(x, first, sc.rows)), sc.skip(s, m, r));
        autograd::Variable loss = autograd::Scale(nn::MseLoss(out, Rows(y, first, sc.rows)), scale);
        absl::Status st = autograd::Backward(loss);
        if (!st.ok()) std::fprintf(stderr, "reference backward: %s\n", st.ToString().c_str());
      }
    }
    (void)sgd.Step(sc.lr);
    sgd.ZeroGrad(sc.alternate_zero ? (s % 2 == 0) : sc.set_to_none);
  }
  std::vector<std::vector<float>> out;
  for (const auto& p : mlp->parameters()) out.push_back(p.data().ToVector());
  return out;
}

// Knows which MLP layers every rank skips at every step (layer k's weight
// and bias are parameters 2k and 2k+1), so it has each iteration's global
// used set while backward runs, as the coordinator's plan does
// (KnowsAhead): the reducer skips buckets unused on every rank.
class ScriptedSource : public UnusedParameterSource {
 public:
  using LayerSkips = std::function<std::set<int>(int step, int rank)>;
  ScriptedSource(int world, size_t params, LayerSkips skips)
      : world_(world), params_(params), skips_(std::move(skips)) {}
  void Submit(int64_t, const std::vector<uint8_t>&) override {}
  absl::StatusOr<std::vector<uint8_t>> GlobalUsed(int64_t iteration, std::chrono::milliseconds) override {
    return Used(iteration);
  }
  bool KnowsAhead() const override { return true; }
  std::optional<std::vector<uint8_t>> TryGlobalUsed(int64_t iteration) override { return Used(iteration); }

 private:
  std::vector<uint8_t> Used(int64_t iteration) const {
    std::vector<uint8_t> used(params_, 0);
    for (size_t i = 0; i < params_; ++i) {
      for (int r = 0; r < world_; ++r) {
        if (!skips_(static_cast<int>(iteration), r).count(static_cast<int>(i / 2))) used[i] = 1;
      }
    }
    return used;
  }
  const int world_;
  const size_t params_;
  const LayerSkips skips_;
};

// Records every iteration's launch order.
class OrderObserver : public ReducerObserver {
 public:
  void OnIterationFinalized(const IterationTrace& t) override {
    if (t.synced) traces.push_back(t);
  }
  std::vector<IterationTrace> traces;
};

inline std::string PlanString(const BucketPlan& plan) {
  std::vector<std::string> parts;
  for (const auto& b : plan) parts.push_back(absl::StrJoin(b, ","));
  return absl::StrJoin(parts, "|");
}

inline std::shared_ptr<comm::ProcessGroup> MakeGroup(const std::string& dir, int rank, int world,
                                                     std::chrono::milliseconds timeout,
                                                     const std::string& backend = "gloo",
                                                     const std::string& prefix = "ddp") {
  auto store = std::make_shared<comm::FileStore>(dir);
  comm::GroupOptions opts;
  opts.timeout = timeout;
  opts.prefix = prefix;
  opts.job_tag = "ddp-test";
  // shm: buckets above 256 B are reduced in place in shared memory, smaller
  // ones by the one-step algorithm: both paths run.
  opts.shm_small_bytes = 256;
  // hier: two "hosts" of world/2 ranks (one rank per host at world 2), so
  // both the shared-memory and the cross-host parts run.
  if (backend == "hier") opts.topology = comm::Topology::Blocks(world, world >= 4 ? world / 2 : 1);
  auto pg = comm::CreateProcessGroup(backend, store, rank, world, opts);
  if (!pg.ok()) {
    std::fprintf(stderr, "rank %d: process group: %s\n", rank, pg.status().ToString().c_str());
    return nullptr;
  }
  return std::shared_ptr<comm::ProcessGroup>(std::move(*pg));
}

// Inside rank `rank`'s child: `mlp`'s weights are within `tol` of `want`
// (RunReference's), and every rank of `pg` holds the very same bits (also
// under compression). Returns 0 or 1 (CHILD_CHECK); `worst`: the largest
// difference seen.
inline int CheckWeights(int rank, const nn::MLP& mlp, const std::vector<std::vector<float>>& want,
                        comm::ProcessGroup& pg, float tol, float* worst) {
  const auto params = mlp.parameters();
  std::string all_weights;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> got = params[i].data().ToVector();
    all_weights.append(reinterpret_cast<const char*>(got.data()), got.size() * sizeof(float));
    float diff = 0;
    for (size_t j = 0; j < got.size(); ++j) diff = std::max(diff, std::fabs(got[j] - want[i][j]));
    *worst = std::max(*worst, diff);
    CHILD_CHECK(rank, diff <= tol, absl::StrCat(params[i].name(), " max abs diff to one process ", diff));
  }
  auto weights = pg.AllgatherBytes(all_weights, std::chrono::milliseconds(20000));
  CHILD_CHECK(rank, weights.ok(), weights.status().ToString());
  for (const auto& w : *weights) CHILD_CHECK(rank, w == (*weights)[0], "ranks ended with different weights");
  return 0;
}

// One rank of the scenario under DDP; returns 0 when the weights match the
// reference (max abs diff <= tol), launches were ascending in every
// iteration, and all ranks ended with the same bucket plan.
inline int RunDdpRank(const Scenario& sc, int rank, const std::string& dir, float tol = 1e-5f) {
  std::shared_ptr<comm::ProcessGroup> pg = MakeGroup(dir, rank, sc.world, std::chrono::milliseconds(20000), sc.backend);
  CHILD_CHECK(rank, pg != nullptr, "group");
  // Each rank starts from different weights: DDP must broadcast rank 0's.
  auto mlp = std::make_shared<nn::MLP>(Widths(), sc.device, kSeed + static_cast<uint64_t>(rank));
  DdpOptions opts;
  opts.bucket_caps = *BucketCaps::FromMiB(sc.bucket_cap_mb, sc.first_bucket_cap_mb);
  opts.find_unused_parameters = sc.find_unused;
  opts.timeout = std::chrono::milliseconds(20000);
  opts.rebuild = sc.rebuild;
  auto hook = CommHookFromFlag(sc.compression);
  CHILD_CHECK(rank, hook.ok(), hook.status().ToString());
  opts.comm_hook = *hook;
  auto ddp_or = DistributedDataParallel::Create(mlp, pg, opts);
  CHILD_CHECK(rank, ddp_or.ok(), ddp_or.status().ToString());
  auto ddp = std::move(*ddp_or);
  auto observer = std::make_shared<OrderObserver>();
  ddp->reducer().SetObserver(observer);
  optim::SGD sgd(mlp->named_parameters(), {});
  const int64_t n = static_cast<int64_t>(sc.world) * sc.micro * sc.rows;
  const float scale = 1.0f / static_cast<float>(sc.micro);
  for (int s = 0; s < sc.steps; ++s) {
    ddp->reducer().DeclareIteration(s);  // the step check compares it across ranks
    auto [x, y] = StepData(s, n, sc.device);
    for (int m = 0; m < sc.micro; ++m) {
      std::optional<NoSync> guard;
      if (m + 1 < sc.micro) guard.emplace(ddp->NoSync());
      const int64_t first = (static_cast<int64_t>(rank) * sc.micro + m) * sc.rows;
      autograd::Variable xin(Rows(x, first, sc.rows));
      const std::set<int> skip = sc.skip(s, m, rank);
      if (sc.discard_first_output) {
        // Forward whose output is dropped without backward (all layers used).
        auto dropped = ddp->Forward([&] { return mlp->Forward(xin, {}); });
        CHILD_CHECK(rank, dropped.ok(), dropped.status().ToString());
      }
      auto out = ddp->Forward([&] { return mlp->Forward(xin, skip); });
      CHILD_CHECK(rank, out.ok(), out.status().ToString());
      autograd::Variable loss = autograd::Scale(nn::MseLoss(*out, Rows(y, first, sc.rows)), scale);
      absl::Status st = autograd::Backward(loss);
      CHILD_CHECK(rank, st.ok(), absl::StrCat("step ", s, " micro ", m, ": ", st.ToString()));
    }
    absl::Status st = sgd.Step(sc.lr);
    CHILD_CHECK(rank, st.ok(), st.ToString());
    sgd.ZeroGrad(sc.alternate_zero ? (s % 2 == 0) : sc.set_to_none);
    if (s == 0 && sc.rebuild == RebuildMode::kExternal && sc.external_plan) {
      st = ddp->reducer().ApplyBucketPlan(sc.external_plan(ddp->reducer()));
      CHILD_CHECK(rank, st.ok(), st.ToString());
    }
  }
  // Launch order: ascending and complete in every synced iteration.
  CHILD_CHECK(rank, static_cast<int>(observer->traces.size()) == sc.steps, "one trace per step");
  for (const auto& t : observer->traces) {
    std::vector<size_t> want(t.buckets.size());
    for (size_t k = 0; k < want.size(); ++k) want[k] = k;
    CHILD_CHECK(rank, t.launch_order == want,
             absl::StrCat("iteration ", t.iteration, " launch order ", absl::StrJoin(t.launch_order, ",")));
  }
  // Same bucket plan on every rank.
  auto plans = pg->AllgatherBytes(PlanString(ddp->reducer().bucket_plan()), std::chrono::milliseconds(20000));
  CHILD_CHECK(rank, plans.ok(), plans.status().ToString());
  for (const auto& p : *plans) CHILD_CHECK(rank, p == (*plans)[0], absl::StrCat("plans differ: ", p, " vs ", (*plans)[0]));
  float worst = 0;
  if (int bad = CheckWeights(rank, *mlp, RunReference(sc), *pg, tol, &worst); bad != 0) return bad;
  if (rank == 0 && sc.compression != "none") {
    std::fprintf(stderr, "%s compression over %s: max |w - w_exact| after %d steps = %.3g\n", sc.compression.c_str(),
                 sc.backend.c_str(), sc.steps, static_cast<double>(worst));
  }
  return 0;
}

}  // namespace psync::ddp::testing
