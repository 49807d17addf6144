// ZeRO (--zero=1|2|3): the reducer reduce-scatters each bucket and the
// sharded optimizer updates only this rank's shard, then all-gathers the
// parameters (--zero=3: each layer's, just before its forward and backward).
// Real ranks (forked) train an MLP with AdamW four ways in the same
// processes: --zero=0 (the reference), 1, 2 and 3, and compare the weights:
// bit for bit on shm (the reduce-scatter sums in the allreduce's order, the
// update is element-wise), within float round-off on gloo and hier. With
// unused parameters (a layer skipped on odd steps, one skipped by one rank
// only), no_sync accumulation, clipping, a bucket plan changed mid-run (the
// state moves to its new owners), and the memory each rank holds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/ddp/ddp_scenario.h"
#include "psync/optim/adamw.h"
#include "worker/optim/sharded_optimizer.h"
#include "psync/optim/update_rule.h"
#include "worker/ddp/reducer.h"

namespace psync::ddp::testing {
namespace {

using test_support::ExpectAllRanksOk;
using test_support::RunRanks;
using test_support::TempDir;

struct ZeroCase {
  std::string name;
  std::string backend = "shm";
  int world = 2;
  int micro = 1;
  bool skip_odd = false;      // layer 1 skipped on odd steps on every rank
  bool skip_rank1 = false;    // layer 2 skipped by rank 1 only (used elsewhere)
  double clip = 0;
  bool replan = false;        // a different bucket plan from step 2 on
  std::vector<int64_t> widths = {8, 32, 32, 32, 4};
  int steps = 5;
  bool scripted = false;      // the global unused set known ahead (ScriptedSource): unused buckets skipped
};

std::string CaseName(const ::testing::TestParamInfo<ZeroCase>& info) { return info.param.name; }

struct RunResult {
  std::vector<std::vector<float>> weights;
  int64_t state_bytes = 0;
  int64_t gradient_bytes = 0;
  size_t largest_bucket_bytes = 0;
  NamedTensors state;  // the full optimizer state (CheckpointState)
  size_t skipped_buckets = 0;  // over the run
  int64_t parameter_bytes = 0;
  int64_t window_bytes = 0;  // --zero=3: the most parameters gathered at once
};

std::set<int> Skips(const ZeroCase& zc, int step, int rank) {
  std::set<int> s;
  if (zc.skip_odd && step % 2 == 1) s.insert(1);
  if (zc.skip_rank1 && rank == 1) s.insert(2);
  return s;
}

// One run of the case at `zero` on this rank; nullopt on failure (printed).
std::optional<RunResult> Train(const ZeroCase& zc, int zero, int rank, const std::string& dir) {
  auto store = std::make_shared<comm::FileStore>(dir);
  comm::GroupOptions go;
  go.timeout = std::chrono::milliseconds(20000);
  go.prefix = absl::StrCat("zero", zero);
  go.job_tag = "zero-test";
  go.shm_small_bytes = 256;
  if (zc.backend == "hier") go.topology = comm::Topology::Blocks(zc.world, zc.world >= 4 ? zc.world / 2 : 1);
  auto pg_or = comm::CreateProcessGroup(zc.backend, store, rank, zc.world, go);
  if (!pg_or.ok()) {
    std::fprintf(stderr, "rank %d: group: %s\n", rank, pg_or.status().ToString().c_str());
    return std::nullopt;
  }
  std::shared_ptr<comm::ProcessGroup> pg(std::move(*pg_or));
  auto mlp = std::make_shared<nn::MLP>(zc.widths, Device::CPU(), kSeed + static_cast<uint64_t>(rank));
  DdpOptions opts;
  opts.bucket_caps = *BucketCaps::FromMiB(0.004, 0.001);
  opts.find_unused_parameters = zc.skip_odd || zc.skip_rank1;
  opts.timeout = std::chrono::milliseconds(20000);
  opts.rebuild = RebuildMode::kBroadcastFromRank0;  // the default: a new layout after the first backward
  opts.zero_stage = zero;
  std::shared_ptr<UnusedParameterSource> source;
  if (zc.scripted) {
    source = std::make_shared<ScriptedSource>(zc.world, mlp->parameters().size(),
                                              [zc](int step, int r) { return Skips(zc, step, r); });
  }
  auto ddp_or = DistributedDataParallel::Create(mlp, pg, opts, source);
  if (!ddp_or.ok()) {
    std::fprintf(stderr, "rank %d: ddp: %s\n", rank, ddp_or.status().ToString().c_str());
    return std::nullopt;
  }
  auto ddp = std::move(*ddp_or);
  auto observer = std::make_shared<OrderObserver>();
  ddp->reducer().SetObserver(observer);
  optim::OptimizerOptions oo;
  oo.weight_decay = 0.1;
  std::unique_ptr<optim::Optimizer> opt;
  if (zero == 0) {
    opt = std::make_unique<optim::AdamW>(mlp->named_parameters(), oo);
  } else {
    auto sharded = optim::ShardedOptimizer::Create(mlp->named_parameters(), std::make_unique<optim::AdamWRule>(oo));
    if (!sharded.ok()) return std::nullopt;
    absl::Status st = (*sharded)->Attach(ddp->reducer().zero_buckets());
    if (!st.ok()) {
      std::fprintf(stderr, "rank %d: attach: %s\n", rank, st.ToString().c_str());
      return std::nullopt;
    }
    opt = std::move(*sharded);
  }
  const int64_t rows = 4, n = static_cast<int64_t>(zc.world) * zc.micro * rows;
  for (int s = 0; s < zc.steps; ++s) {
    if (zc.replan && s == 2) {
      // The reverse of the current plan's order, in buckets of 3 parameters.
      BucketPlan now = ddp->reducer().bucket_plan(), next;
      std::vector<size_t> order = FlattenPlan(now);
      std::reverse(order.begin(), order.end());
      for (size_t k = 0; k < order.size(); k += 3) {
        next.emplace_back(order.begin() + static_cast<long>(k),
                          order.begin() + static_cast<long>(std::min(order.size(), k + 3)));
      }
      absl::Status st = ddp->reducer().ApplyBucketPlan(next);
      if (!st.ok()) return std::nullopt;
    }
    ddp->reducer().DeclareIteration(s);
    nn::SplitMix64 rng(static_cast<uint64_t>(77 + s));
    const std::vector<float> xv = nn::UniformValues(rng, n * zc.widths.front(), -1.0f, 1.0f);
    const std::vector<float> yv = nn::UniformValues(rng, n * zc.widths.back(), -1.0f, 1.0f);
    Tensor x = Tensor::FromVector(xv, {n, zc.widths.front()}), y = Tensor::FromVector(yv, {n, zc.widths.back()});
    for (int m = 0; m < zc.micro; ++m) {
      std::optional<NoSync> guard;
      if (m + 1 < zc.micro) guard.emplace(ddp->NoSync());
      const int64_t first = (static_cast<int64_t>(rank) * zc.micro + m) * rows;
      autograd::Variable xin(Rows(x, first, rows));
      auto out = ddp->Forward([&] { return mlp->Forward(xin, Skips(zc, s, rank)); });
      if (!out.ok()) return std::nullopt;
      autograd::Variable loss =
          autograd::Scale(nn::MseLoss(*out, Rows(y, first, rows)), 1.0f / static_cast<float>(zc.micro));
      absl::Status st = autograd::Backward(loss);
      if (!st.ok()) {
        std::fprintf(stderr, "rank %d zero %d step %d: backward: %s\n", rank, zero, s, st.ToString().c_str());
        return std::nullopt;
      }
    }
    if (zc.clip > 0) {
      absl::StatusOr<double> norm = opt->ClipGradNorm(zc.clip);
      if (!norm.ok()) return std::nullopt;
    }
    absl::Status st = opt->Step(1e-2);
    if (!st.ok()) {
      std::fprintf(stderr, "rank %d zero %d: step: %s\n", rank, zero, st.ToString().c_str());
      return std::nullopt;
    }
    opt->ZeroGrad();
  }
  if (!ddp->reducer().WaitForParameters().ok()) return std::nullopt;  // the last step's gathers
  RunResult r;
  for (const auto& t : observer->traces) r.skipped_buckets += t.skipped_buckets;
  for (const auto& p : mlp->parameters()) r.weights.push_back(p.data().ToVector());
  r.state_bytes = opt->state_bytes();
  r.gradient_bytes = ddp->reducer().gradient_bytes();
  r.parameter_bytes = ddp->reducer().parameter_bytes();
  if (zero == 3) r.window_bytes = ddp->reducer().zero_buckets()->parameter_window_bytes();
  const BucketPlan plan = ddp->reducer().bucket_plan();
  for (const auto& bucket : plan) {
    size_t bytes = 0;
    for (size_t i : bucket) bytes += mlp->parameters()[i].data().nbytes();
    r.largest_bucket_bytes = std::max(r.largest_bucket_bytes, bytes);
  }
  absl::StatusOr<NamedTensors> state = opt->CheckpointState(true);
  if (!state.ok()) {
    std::fprintf(stderr, "rank %d zero %d: state: %s\n", rank, zero, state.status().ToString().c_str());
    return std::nullopt;
  }
  for (auto& [k, t] : *state) r.state.emplace_back(k, t.To(Device::CPU()).Contiguous());
  return r;
}

float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

class Zero : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(Zero, ShardedEqualsUnsharded) {
  const ZeroCase zc = GetParam();
  TempDir dir;
  // Bit for bit on shm without clipping; clipping's norm is summed in
  // another order (1e-6); gloo/hier sum in another order than their allreduce.
  const bool bitwise = zc.backend == "shm" && zc.clip == 0;
  const float tol = zc.backend == "shm" ? 1e-6f : 2e-5f;
  ExpectAllRanksOk(RunRanks(
      zc.world,
      [&](int rank) -> int {
        std::optional<RunResult> ref = Train(zc, 0, rank, dir.path());
        CHILD_CHECK(rank, ref.has_value(), "zero=0 run");
        for (int zero : {1, 2, 3}) {
          // --zero=3 gathers from the module hooks: every rank must run the
          // same layers (as FSDP requires), which one rank skipping a layer breaks.
          if (zero == 3 && zc.skip_rank1) continue;
          std::optional<RunResult> got = Train(zc, zero, rank, dir.path());
          CHILD_CHECK(rank, got.has_value(), absl::StrCat("zero=", zero, " run"));
          for (size_t i = 0; i < ref->weights.size(); ++i) {
            const std::vector<float>& a = ref->weights[i];
            const std::vector<float>& b = got->weights[i];
            CHILD_CHECK(rank, a.size() == b.size(), "sizes");
            if (bitwise) {
              CHILD_CHECK(rank, std::memcmp(a.data(), b.data(), a.size() * 4) == 0,
                          absl::StrCat("zero=", zero, ": parameter ", i, " differs, max ", MaxDiff(a, b)));
            } else {
              CHILD_CHECK(rank, MaxDiff(a, b) <= tol,
                          absl::StrCat("zero=", zero, ": parameter ", i, " max abs diff ", MaxDiff(a, b)));
            }
          }
          // The gathered state is the unsharded optimizer's, name for name.
          CHILD_CHECK(rank, got->state.size() == ref->state.size(), "state entries");
          for (size_t k = 0; k < ref->state.size(); ++k) {
            CHILD_CHECK(rank, got->state[k].first == ref->state[k].first,
                        absl::StrCat(got->state[k].first, " vs ", ref->state[k].first));
            const Tensor& a = ref->state[k].second;
            const Tensor& b = got->state[k].second;
            CHILD_CHECK(rank, a.shape() == b.shape() && a.dtype() == b.dtype(), ref->state[k].first);
            if (a.dtype() == kInt64) {
              CHILD_CHECK(rank, a.Item<int64_t>() == b.Item<int64_t>(),
                          absl::StrCat(ref->state[k].first, ": ", a.Item<int64_t>(), " vs ", b.Item<int64_t>()));
            } else if (bitwise) {
              CHILD_CHECK(rank, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0, ref->state[k].first);
            }
          }
          if (zc.scripted) {
            // Layer 1's weight fills a bucket of its own: not sent on the odd steps, with and without ZeRO.
            CHILD_CHECK(rank, ref->skipped_buckets > 0 && got->skipped_buckets == ref->skipped_buckets,
                        absl::StrCat("skipped buckets: zero=0 ", ref->skipped_buckets, ", zero=", zero, " ",
                                     got->skipped_buckets));
          }
          if (rank == 0) {
            std::fprintf(stderr, "%s zero=%d: optimizer state %lld B (unsharded %lld B), gradients %lld B "
                         "(unsharded %lld B, largest bucket %zu B)\n", zc.name.c_str(), zero,
                         static_cast<long long>(got->state_bytes), static_cast<long long>(ref->state_bytes),
                         static_cast<long long>(got->gradient_bytes), static_cast<long long>(ref->gradient_bytes),
                         got->largest_bucket_bytes);
          }
        }
        return 0;
      },
      std::chrono::seconds(120)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Zero,
    ::testing::Values(ZeroCase{"shm2"}, ZeroCase{"shm3_skip_odd", "shm", 3, 1, true},
                      ZeroCase{"shm4_accumulate_skip", "shm", 4, 2, true, true},
                      ZeroCase{"shm2_clip", "shm", 2, 1, false, false, 0.05},
                      ZeroCase{"shm3_replan", "shm", 3, 1, true, false, 0, true},
                      ZeroCase{"gloo3_accumulate_skip", "gloo", 3, 2, true, true},
                      ZeroCase{"hier4_skip_clip", "hier", 4, 1, true, false, 0.05},
                      ZeroCase{"shm3_unused_buckets_skipped", "shm", 3, 2, true, true, 0, false, {8, 32, 32, 32, 4}, 5,
                               true},
                      ZeroCase{"gloo2_unused_buckets_skipped", "gloo", 2, 1, true, false, 0.05, true,
                               {8, 32, 32, 32, 4}, 5, true}),
    CaseName);

// A rank with another --zero than its peers would pair other collectives:
// DDP's construction names it on every rank instead.
TEST(ZeroMismatch, RanksReducingDifferentlyAreNamed) {
  TempDir dir;
  ExpectAllRanksOk(RunRanks(
      2,
      [&](int rank) -> int {
        std::shared_ptr<comm::ProcessGroup> pg = MakeGroup(dir.path(), rank, 2, std::chrono::milliseconds(20000), "shm");
        CHILD_CHECK(rank, pg != nullptr, "group");
        auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
        DdpOptions opts;
        opts.zero_stage = rank == 0 ? 1 : 0;
        auto ddp = DistributedDataParallel::Create(mlp, pg, opts);
        CHILD_CHECK(rank, !ddp.ok() && ddp.status().code() == absl::StatusCode::kInvalidArgument,
                    ddp.ok() ? "accepted" : ddp.status().ToString());
        const std::string msg(ddp.status().message());
        CHILD_CHECK(rank, msg.find("zero 1") != std::string::npos && msg.find("zero 0") != std::string::npos &&
                              msg.find("--zero") != std::string::npos,
                    msg);
        return 0;
      },
      std::chrono::seconds(60)));
}

// At world 4 each rank holds about a quarter of the optimizer state (plus
// the step counts); with --zero=2 a quarter of the gradients plus one
// staging bucket; with --zero=3 also a quarter of the parameters (its
// shards) plus the window of buckets gathered at once: a layer's (at most
// two: weight and bias), the prefetched one, and the one kept for a layer
// that may share it, each at most the largest bucket.
TEST(ZeroMemory, AQuarterOfEachAtWorld4) {
  ZeroCase zc;
  zc.name = "memory";
  zc.world = 4;
  zc.widths = {64, 128, 128, 128, 128, 128, 64};
  zc.steps = 2;
  TempDir dir;
  ExpectAllRanksOk(RunRanks(
      zc.world,
      [&](int rank) -> int {
        std::optional<RunResult> ref = Train(zc, 0, rank, dir.path());
        std::optional<RunResult> one = Train(zc, 1, rank, dir.path());
        std::optional<RunResult> two = Train(zc, 2, rank, dir.path());
        std::optional<RunResult> three = Train(zc, 3, rank, dir.path());
        CHILD_CHECK(rank, ref && one && two && three, "runs");
        const double state_ratio = static_cast<double>(one->state_bytes) / static_cast<double>(ref->state_bytes);
        const double grad_ratio =
            static_cast<double>(two->gradient_bytes - static_cast<int64_t>(two->largest_bucket_bytes)) /
            static_cast<double>(ref->gradient_bytes);
        const double param_ratio = static_cast<double>(three->parameter_bytes - three->window_bytes) /
                                   static_cast<double>(ref->parameter_bytes);
        const int64_t window_bound =
            4 * (static_cast<int64_t>(three->largest_bucket_bytes) + kZeroShardAlign * zc.world * 4);
        std::fprintf(stderr, "rank %d: state %.4fx, zero=2 gradients (minus one bucket) %.4fx, zero=3 parameters "
                     "%lld B of %lld B, %.4fx less the window of %lld B\n", rank, state_ratio, grad_ratio,
                     static_cast<long long>(three->parameter_bytes), static_cast<long long>(ref->parameter_bytes),
                     param_ratio, static_cast<long long>(three->window_bytes));
        CHILD_CHECK(rank, state_ratio <= 0.26, std::to_string(state_ratio));
        CHILD_CHECK(rank, grad_ratio <= 0.26, std::to_string(grad_ratio));
        CHILD_CHECK(rank, two->state_bytes == one->state_bytes && three->state_bytes == one->state_bytes,
                    "zero=2 and 3 shard the same state");
        CHILD_CHECK(rank, param_ratio <= 0.26, std::to_string(param_ratio));
        CHILD_CHECK(rank, three->window_bytes > 0 && three->window_bytes <= window_bound,
                    absl::StrCat("window ", three->window_bytes, " B, bound ", window_bound, " B"));
        return 0;
      },
      std::chrono::seconds(120)));
}

}  // namespace
}  // namespace psync::ddp::testing
