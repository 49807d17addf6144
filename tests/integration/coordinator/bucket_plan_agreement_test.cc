// The coordinator's bucket plans and a worker's own bucket assignment agree
// for the same parameter list (issue 20, item 2). The coordinator packs the
// plans it announces (JoinResponse.initial_bucket_plan, then the
// Plan.bucket_plan made from rank 0's ready order) through
// server/bucket_planner.h, each worker its own through
// worker/ddp/bucket_assignment.h; both use include/psync/common/bucket_packer.h. Before,
// the coordinator closed a bucket before a parameter would exceed the cap
// and the workers once it was reached, so the plans differed wherever a
// parameter straddled a cap. In process: JobState with a ManualScheduler,
// and the parameters of a GPT built by the model registry, as a worker's.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/manual_scheduler.h"
#include "server/job_state.h"
#include "server/plan_queue.h"
#include "worker/ddp/bucket_assignment.h"
#include "psync/nn/models/registry.h"

namespace psync {
namespace {

using ddp::BucketPlan;
namespace v1 = psync::v1;

// A worker's parameter list: what it sends in Join and what its reducer packs.
struct ParamList {
  std::vector<v1::ParamSpec> manifest;
  std::vector<size_t> bytes;
  std::vector<Device> devices;
};

ParamList GptParams() {
  nn::ModelOptions o;
  o.vocab_size = 96;
  o.block_size = 16;
  o.flags = nn::ModelFlags({{"n-layer", "2"}, {"n-head", "2"}, {"n-embd", "32"}});
  auto model = nn::Models().Create("gpt", o);
  EXPECT_TRUE(model.ok()) << model.status();
  ParamList out;
  if (!model.ok()) return out;
  for (const auto& [name, p] : (*model)->named_parameters()) {
    v1::ParamSpec spec;
    spec.set_name(name);
    for (int64_t d : p.shape()) spec.add_shape(d);
    spec.set_element_size(static_cast<int>(p.data().element_size()));
    out.manifest.push_back(spec);
    out.bytes.push_back(p.data().nbytes());
    out.devices.push_back(p.data().device());
  }
  return out;
}

BucketPlan FromProto(const v1::BucketPlan& plan) {
  BucketPlan out;
  for (const v1::Bucket& b : plan.buckets()) out.emplace_back(b.param_index().begin(), b.param_index().end());
  return out;
}

std::string Show(const BucketPlan& plan) {
  std::string s;
  for (const auto& b : plan) {
    s += "[";
    for (size_t p : b) s += std::to_string(p) + " ";
    s += "]";
  }
  return s;
}

// A job of one rank that joined with `params` and `caps` and attached.
struct OneRankJob {
  OneRankJob(const ParamList& params, const BucketCaps& caps) {
    server::JobConfig cfg;
    cfg.job_id = "agree";
    cfg.world_size = 1;
    job = std::make_unique<server::JobState>(cfg, &sched);
    v1::JoinRequest req;
    req.set_job_id("agree");
    req.set_requested_rank(0);
    req.set_hostname("h");
    req.set_backend("gloo");
    req.set_bucket_cap_bytes(static_cast<int64_t>(caps.bucket_cap_bytes));
    req.set_first_bucket_cap_bytes(static_cast<int64_t>(caps.first_bucket_cap_bytes));
    for (const v1::ParamSpec& p : params.manifest) *req.add_manifest() = p;
    job->Join(req, [this](absl::StatusOr<server::JoinAnswer> a) {
      ASSERT_TRUE(a.ok()) << a.status();
      joined = a->Full();
    });
    v1::Hello hello;
    hello.set_job_id("agree");
    hello.set_rank(0);
    hello.set_generation(joined.generation());
    absl::StatusOr<server::StreamRef> attached = job->Attach(hello, plans);
    EXPECT_TRUE(attached.ok()) << attached.status();
    if (attached.ok()) stream = *attached;
  }

  // Reports iterations 0 and 1, the second with `ready_order`; the bucket
  // plan Plan{1} announces.
  v1::BucketPlan PlanFromReadyOrder(const std::vector<size_t>& ready_order, size_t num_params) {
    const std::string all_used(static_cast<size_t>((num_params + 7) / 8), '\xff');
    v1::Report r;
    r.set_used_bitmap(all_used);
    r.set_iteration(0);
    EXPECT_TRUE(job->Report(stream, r).ok());
    r.set_iteration(1);
    for (size_t p : ready_order) r.add_ready_order(static_cast<int>(p));
    EXPECT_TRUE(job->Report(stream, r).ok());
    v1::Plan plan;
    EXPECT_TRUE(plans->TryPop(&plan));
    EXPECT_TRUE(plans->TryPop(&plan));
    EXPECT_EQ(plan.iteration(), 1);
    EXPECT_TRUE(plan.has_bucket_plan());
    return plan.bucket_plan();
  }

  ManualScheduler sched;
  std::unique_ptr<server::JobState> job;
  std::shared_ptr<server::PlanQueue> plans = std::make_shared<server::PlanQueue>();
  v1::JoinResponse joined;
  server::StreamRef stream;
};

// Caps worth checking for `params`: small ones (many buckets), ones a
// parameter straddles (the first cap ends inside the second parameter
// walked, in reverse order), ones met exactly by a running sum, and the
// defaults (25 MiB / 1 MiB: one bucket here).
std::vector<BucketCaps> CapsFor(const ParamList& params) {
  const size_t n = params.bytes.size();
  const size_t last = params.bytes[n - 1], second_last = params.bytes[n - 2];
  return {
      BucketCaps{1, 1},
      BucketCaps{1024, 4096},
      BucketCaps{4096, 16384},
      BucketCaps{last + 1, 2 * (last + second_last)},
      BucketCaps{last + second_last, last + second_last},
      BucketCaps{},
  };
}

TEST(BucketPlanAgreement, InitialPlanIsTheWorkersOwnForReverseOrder) {
  const ParamList params = GptParams();
  ASSERT_GT(params.bytes.size(), 10u);
  for (const BucketCaps& caps : CapsFor(params)) {
    SCOPED_TRACE(testing::Message() << "caps " << caps.first_bucket_cap_bytes << " / " << caps.bucket_cap_bytes);
    OneRankJob j(params, caps);
    const BucketPlan coordinator = FromProto(j.joined.initial_bucket_plan());
    const BucketPlan worker =
        ddp::AssignBuckets(params.bytes, params.devices, caps, ddp::ReverseOrder(params.bytes.size()));
    EXPECT_EQ(coordinator, worker) << "coordinator " << Show(coordinator) << "\nworker      " << Show(worker);
    EXPECT_TRUE(ddp::ValidateBucketPlan(coordinator, params.devices).ok());
  }
}

TEST(BucketPlanAgreement, PlanFromRank0sReadyOrderIsTheWorkersOwnForThatOrder) {
  const ParamList params = GptParams();
  ASSERT_GT(params.bytes.size(), 10u);
  std::mt19937 rng(20);
  for (const BucketCaps& caps : CapsFor(params)) {
    SCOPED_TRACE(testing::Message() << "caps " << caps.first_bucket_cap_bytes << " / " << caps.bucket_cap_bytes);
    std::vector<size_t> order = ddp::ReverseOrder(params.bytes.size());
    std::shuffle(order.begin(), order.end(), rng);
    OneRankJob j(params, caps);
    const BucketPlan coordinator = FromProto(j.PlanFromReadyOrder(order, params.bytes.size()));
    ASSERT_TRUE(ddp::ValidateOrder(order, params.bytes.size()).ok());
    const BucketPlan worker = ddp::AssignBuckets(params.bytes, params.devices, caps, order);
    EXPECT_EQ(coordinator, worker) << "coordinator " << Show(coordinator) << "\nworker      " << Show(worker);
  }
}

}  // namespace
}  // namespace psync
