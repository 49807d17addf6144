// PlanWindow (which plan the trainer needs when) and the unused set the
// reducer reads from the mailbox (PlanMailbox itself: plan_mailbox_test.cc).
#include "worker/control/plan_window.h"

#include <gtest/gtest.h>

#include "worker/control/plan_mailbox.h"
#include "worker/control/unused_source.h"

namespace psync::control {
namespace {

using namespace std::chrono_literals;

IterationPlan Plan(int64_t it, PlanAction action = PlanAction::kContinue, int64_t stop_after = -1) {
  IterationPlan p;
  p.iteration = it;
  p.action = action;
  p.stop_after = stop_after;
  p.globally_unused = {0, 1, 0};
  return p;
}

TEST(PlanWindow, StepJNeedsOnlyPlanJMinusK) {
  PlanWindow w(2);
  EXPECT_EQ(w.NeededBeforeStep(0), -2);
  EXPECT_EQ(w.NeededBeforeStep(1), -1);
  EXPECT_EQ(w.NeededBeforeStep(2), 0);
  EXPECT_EQ(w.NeededBeforeStep(10), 8);
  EXPECT_EQ(w.next(), 0);
  ASSERT_TRUE(w.Consume(Plan(0)).ok());
  EXPECT_EQ(w.next(), 1);
  auto skipped = w.Consume(Plan(2));
  EXPECT_EQ(skipped.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(skipped.message()), "the coordinator sent the plan of iteration 2 where iteration 1 was due");
  EXPECT_EQ(PlanWindow(0).lookahead(), 1) << "K is at least 1";
  PlanWindow resumed(3, 100);
  EXPECT_EQ(resumed.next(), 100);
}

// What the trainer and control::Job both do before a step: take the plans
// it needs from the mailbox, in order, and let the mailbox drop them.
TEST(PlanWindow, TakeThroughConsumesAndReleasesInOrderOrFailsWithTheMailbox) {
  PlanMailbox mb;
  PlanWindow w(1);
  mb.Deliver(Plan(0));
  mb.Deliver(Plan(1, PlanAction::kStopAfter, 1));
  mb.Deliver(Plan(2));
  ASSERT_TRUE(w.TakeThrough(-1, mb, 10ms).ok()) << "nothing needed yet";
  EXPECT_EQ(w.next(), 0);
  ASSERT_TRUE(w.TakeThrough(1, mb, 10ms).ok());
  EXPECT_EQ(w.next(), 2);
  EXPECT_EQ(w.stop_after(), 1) << "plan 1's stop was consumed";
  EXPECT_EQ(mb.held(), 1u) << "plans 0 and 1 were released";
  EXPECT_EQ(w.TakeThrough(3, mb, 10ms).code(), absl::StatusCode::kDeadlineExceeded) << "plan 3 never came";
  EXPECT_EQ(w.next(), 3) << "plan 2 was taken before the wait for 3";
  mb.Close(absl::UnavailableError("coordinator lost"));
  absl::Status st = w.TakeThrough(3, mb, 10ms);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
}

TEST(PlanWindow, StopAnnouncedAheadStopsEveryRankAfterTheSameIteration) {
  // K = 2: a shutdown while Plan{5} is the first unsent one stops after 6,
  // announced from Plan{5} on. A rank needs Plan{5} before step 7.
  PlanWindow w(2);
  for (int64_t it = 0; it < 5; ++it) ASSERT_TRUE(w.Consume(Plan(it)).ok());
  EXPECT_FALSE(w.StopsBefore(7));
  ASSERT_TRUE(w.Consume(Plan(5, PlanAction::kStopAfter, 6)).ok());
  EXPECT_FALSE(w.StopsBefore(6));
  EXPECT_TRUE(w.StopsBefore(7));
  EXPECT_EQ(w.stop_after(), 6);
  ASSERT_TRUE(w.Consume(Plan(6, PlanAction::kStopAfter, 6)).ok());
  EXPECT_EQ(w.stop_after(), 6);
}

TEST(PlanWindow, ARegroupStopEndsTheGenerationUnlessAShutdownFollows) {
  PlanWindow w(2);
  IterationPlan p = Plan(0, PlanAction::kStopAfter, 1);
  p.regroup = true;
  p.reason = "regroup: node 1 is back";
  ASSERT_TRUE(w.Consume(p).ok());
  EXPECT_TRUE(w.regroup()) << "the run ends with its checkpoint; the job goes on";
  EXPECT_TRUE(w.StopsBefore(2));
  IterationPlan q = Plan(1, PlanAction::kStopAfter, 1);
  q.reason = "shutdown requested by psyncctl";
  ASSERT_TRUE(w.Consume(q).ok());
  EXPECT_FALSE(w.regroup()) << "a shutdown after the regroup: the same stop ends the job";
  EXPECT_EQ(w.stop_reason(), "shutdown requested by psyncctl");
  EXPECT_EQ(w.stop_after(), 1);
}

TEST(PlanWindow, StopOrBucketPlanTooLateForTheLookaheadIsRefused) {
  PlanWindow w(2);
  auto late = w.Consume(Plan(0, PlanAction::kStopAfter, 2));  // ranks may already run step 2
  EXPECT_EQ(late.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(late.message()).find("must be in 0..1"), std::string::npos) << late;
  PlanWindow b(2);
  IterationPlan p = Plan(0);
  p.bucket_plan = ddp::BucketPlan{{0, 1}, {2}};
  p.bucket_plan_id = 1;
  p.applies_from = 1;  // some rank may be in step 1 already
  auto early = b.Consume(p);
  EXPECT_EQ(early.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(early.message()).find("applies from iteration 1, before iteration 2"), std::string::npos)
      << early;
}

TEST(PlanWindow, BucketPlanTakenOnceAtItsIteration) {
  PlanWindow w(2);
  ASSERT_TRUE(w.Consume(Plan(0)).ok());
  IterationPlan p = Plan(1);
  p.bucket_plan = ddp::BucketPlan{{2, 1}, {0}};
  p.bucket_plan_id = 1;
  p.applies_from = 3;
  ASSERT_TRUE(w.Consume(p).ok());
  EXPECT_FALSE(w.TakeBucketPlanFor(2));
  auto taken = w.TakeBucketPlanFor(3);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->bucket_plan_id, 1);
  EXPECT_EQ(taken->bucket_plan->size(), 2u);
  EXPECT_FALSE(w.TakeBucketPlanFor(4)) << "applied once";
}

TEST(CoordinatorUnusedSource, GlobalUsedIsTheComplementOfThePlansUnusedSet) {
  auto mb = std::make_shared<PlanMailbox>();
  CoordinatorUnusedSource src(mb);
  mb->Deliver(Plan(0));
  auto used = src.GlobalUsed(0, 1s);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(*used, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(src.GlobalUsed(1, 10ms).status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace psync::control
