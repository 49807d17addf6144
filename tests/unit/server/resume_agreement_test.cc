// The resume agreement (coordinator.proto, "Resume agreement"): ranks join
// with the checkpoint steps they can load and the coordinator picks the
// newest step all of them can load, once the world is complete, for every
// rank alike. The rule itself (NewestCommonStep), the Rendezvous that
// applies it, the limits on the new fields, and a restarted generation whose
// replacement listed the directory before rank 0's last checkpoint landed.
#include <gtest/gtest.h>

#include "common/manual_scheduler.h"
#include "server/job_state.h"
#include "server/limits.h"
#include "server/rendezvous.h"
#include "tests/unit/server/job_state_test_util.h"

namespace psync::server {
namespace {

using namespace job_state_test;

v1::JoinRequest Offer(int rank, std::vector<int64_t> steps, int64_t generation = 0) {
  v1::JoinRequest r = Req(rank);
  r.set_agree_resume(true);
  for (int64_t s : steps) r.add_checkpoint_steps(s);
  r.set_generation(generation);
  return r;
}

std::string Msg(const absl::Status& st) { return std::string(st.message()); }

TEST(NewestCommonStep, IsTheNewestStepEveryListHolds) {
  EXPECT_EQ(NewestCommonStep({}), 0) << "no ranks: from scratch";
  EXPECT_EQ(NewestCommonStep({{}}), 0);
  EXPECT_EQ(NewestCommonStep({{300, 200, 100}}), 300);
  EXPECT_EQ(NewestCommonStep({{300, 200, 100}, {300, 200, 100}}), 300);
  // The old race: the replacement listed before ckpt-300 landed.
  EXPECT_EQ(NewestCommonStep({{300, 200, 100}, {200, 100}}), 200);
  EXPECT_EQ(NewestCommonStep({{200, 100}, {300, 200, 100}, {300, 200}}), 200);
  EXPECT_EQ(NewestCommonStep({{100, 300, 200}, {200, 300}}), 300) << "order does not matter";
  EXPECT_EQ(NewestCommonStep({{300, 300, 100}, {100, 100}}), 100) << "duplicates do not matter";
  EXPECT_EQ(NewestCommonStep({{300}, {200}}), 0) << "nothing common: from scratch";
  EXPECT_EQ(NewestCommonStep({{300, 200}, {}}), 0) << "a rank that can load nothing: from scratch";
}

TEST(ResumeAgreement, RendezvousPicksTheNewestCommonStepOnceComplete) {
  Rendezvous rv(3);
  for (auto [rank, steps] :
       std::vector<std::pair<int, std::vector<int64_t>>>{{0, {300, 200, 100}}, {1, {200, 100}}, {2, {300, 200}}}) {
    v1::JoinRequest req = Offer(rank, steps);
    absl::StatusOr<int> r = rv.PickRank(req);
    ASSERT_TRUE(r.ok()) << "different lists are no conflict with the agreement: " << r.status();
    rv.Add(*r, req);
  }
  EXPECT_TRUE(rv.agree_resume());
  EXPECT_EQ(rv.start_iteration(), 0) << "nothing is decided before the world is complete";
  EXPECT_EQ(rv.Agree(),
            "the newest checkpoint step every rank can load is 200; rank 0 lists step 300 but rank 1 (h:101) cannot "
            "load it");
  EXPECT_EQ(rv.start_iteration(), 200);
}

TEST(ResumeAgreement, NothingCommonStartsFromScratchAndSaysSo) {
  Rendezvous rv(2);
  rv.Add(0, Offer(0, {300}));
  rv.Add(1, Offer(1, {}));
  EXPECT_EQ(rv.Agree(),
            "no checkpoint step is loadable by every rank: starting from scratch; rank 0 lists step 300 but rank 1 "
            "(h:101) cannot load it");
  EXPECT_EQ(rv.start_iteration(), 0);
}

TEST(ResumeAgreement, WithoutTheAgreementNothingChanges) {
  Rendezvous rv(1);
  v1::JoinRequest req = Req(0);
  req.set_start_iteration(70);
  rv.Add(0, req);
  EXPECT_EQ(rv.Agree(), "");
  EXPECT_EQ(rv.start_iteration(), 70);
}

TEST(ResumeAgreement, EveryRankMustAgreeOrNone) {
  Rendezvous rv(2);
  rv.Add(0, Offer(0, {100}));
  absl::StatusOr<int> r = rv.PickRank(Req(1));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Msg(r.status()),
            "rank 1 (h:101) starts at its own iteration but the first worker's (rank 0) lets the coordinator pick the "
            "resume step (--resume): pass --resume to every rank or to none");
}

TEST(ResumeAgreement, LimitsOfTheNewFields) {
  v1::JoinRequest stray = Req(0);
  stray.add_checkpoint_steps(100);
  EXPECT_EQ(Msg(ValidateJoinRequest(stray)),
            "checkpoint_steps has 1 steps but agree_resume is false; list them only with it");
  v1::JoinRequest both = Offer(0, {100});
  both.set_start_iteration(100);
  EXPECT_EQ(Msg(ValidateJoinRequest(both)),
            "start_iteration is 100 with agree_resume; the coordinator picks it (send 0)");
  EXPECT_EQ(Msg(ValidateJoinRequest(Offer(0, {100, 0}))), "checkpoint_steps holds 0; expected 1..4611686018427387904");
  std::vector<int64_t> many(kMaxCheckpointSteps + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i) + 1;
  EXPECT_EQ(Msg(ValidateJoinRequest(Offer(0, many))), "checkpoint_steps has 65 steps; the limit is 64");
  many.pop_back();
  EXPECT_TRUE(ValidateJoinRequest(Offer(0, many)).ok());
  EXPECT_TRUE(ValidateJoinRequest(Offer(0, {})).ok()) << "nothing to offer: from scratch";
}

TEST(ResumeAgreement, RestartedGenerationStartsWhereEveryRankCanLoad) {
  ManualScheduler sched;
  JobConfig cfg = Cfg(2);
  cfg.max_restarts = 1;
  JobState job(cfg, &sched);
  auto mbs = JoinAll(job, {0, 1});
  job.StreamClosed(mbs[1].ref, "stream closed");  // rank 1 died; generation 2 forms
  ASSERT_EQ(job.generation(), 2);

  // The replacement listed the directory before rank 0's ckpt-300 landed;
  // rank 0 (restarted later) sees it. Both start at 200, not refused.
  auto j1 = StartJoin(job, Offer(1, {200, 100}));
  EXPECT_FALSE(j1->done);
  auto j0 = StartJoin(job, Offer(0, {300, 200, 100}, /*generation=*/2));
  ASSERT_TRUE(j0->r.ok()) << j0->r.status();
  ASSERT_TRUE(j1->r.ok()) << j1->r.status();
  EXPECT_EQ(j0->r->start_iteration(), 200);
  EXPECT_EQ(j1->r->start_iteration(), 200);
  std::vector<TestStream> g2 = {AttachOk(job, OwnHello(0, 2)), AttachOk(job, OwnHello(1, 2))};
  ReportAll(job, g2, 200);
  EXPECT_EQ(Next(*g2[0]).iteration(), 200) << "the generation's plans start at the agreed step";

  std::string complete;
  for (const v1::Event& e : job.events().After(0)) {
    if (e.type() == v1::EVENT_WORLD_COMPLETE) complete = e.message();
  }
  EXPECT_EQ(complete.rfind("world complete: 2 ranks (generation 2, from iteration 200): the newest checkpoint step "
                           "every rank can load is 200; rank 0 lists step 300 but rank 1 (h:101) cannot load it; "
                           "restarted ",
                           0),
            0u)
      << complete << ": every rank started afresh, so it counts as a restart";
  v1::StatusResponse st;
  job.FillStatus(&st);
  EXPECT_EQ(st.start_iteration(), 200);
}

}  // namespace
}  // namespace psync::server
