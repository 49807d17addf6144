// PlanMailbox (worker/control/plan_mailbox.h): plans from the coordinator's
// reader thread, waited for by the trainer and dropped once consumed; an
// ABORT plan or the end of the stream fails every wait, with its exit code.
#include "worker/control/plan_mailbox.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "psync/common/exit_code.h"

namespace psync::control {
namespace {

using namespace std::chrono_literals;

IterationPlan Plan(int64_t it, PlanAction action = PlanAction::kContinue) {
  IterationPlan p;
  p.iteration = it;
  p.action = action;
  p.globally_unused = {0, 1, 0};
  return p;
}

TEST(PlanMailbox, WaitReleaseAndHeldStaysBounded) {
  PlanMailbox mb;
  for (int64_t it = 0; it < 1000; ++it) {
    mb.Deliver(Plan(it));
    auto p = mb.Wait(it, 1s);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->iteration, it);
    if (it >= 2) mb.Release(it - 2);  // as the trainer does with K = 2
    EXPECT_LE(mb.held(), 3u);
  }
  EXPECT_EQ(mb.latest(), 999);
  auto gone = mb.Wait(5, 10ms);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(gone.status().message()).find("already consumed"), std::string::npos);
  mb.Deliver(Plan(3));  // a late duplicate of a released plan is not kept
  EXPECT_LE(mb.held(), 3u);
}

TEST(PlanMailbox, WaitTimesOutThenAbortAndCloseFailWaiters) {
  PlanMailbox mb;
  auto t = mb.Wait(0, 20ms);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(std::string(t.status().message()).find("no plan for iteration 0"), std::string::npos);
  auto waiter = std::async(std::launch::async, [&] { return mb.Wait(4, 10s); });
  IterationPlan ab = Plan(3, PlanAction::kAbort);
  ab.reason = "rank 1 (h:1) lost: stream closed";
  mb.Deliver(ab);
  auto r = waiter.get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(std::string(r.status().message()), "rank 1 (h:1) lost: stream closed");
  ASSERT_TRUE(mb.abort_plan());
  EXPECT_EQ(mb.held(), 0u) << "the abort plan is kept apart";

  PlanMailbox closed;
  closed.Close(absl::UnavailableError("coordinator at x lost"));
  EXPECT_EQ(closed.Wait(0, 1s).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(closed.closed_status().code(), absl::StatusCode::kUnavailable);
}

TEST(PlanMailbox, AWaiterWakesWhenItsPlanArrivesFromAnotherThread) {
  PlanMailbox mb;
  auto waiter = std::async(std::launch::async, [&] { return mb.Wait(2, 10s); });
  std::thread reader([&] {
    for (int64_t it = 0; it < 3; ++it) mb.Deliver(Plan(it));
  });
  auto p = waiter.get();
  reader.join();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->iteration, 2);
  EXPECT_EQ(p->globally_unused, (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ(mb.latest(), 2);
  EXPECT_EQ(mb.held(), 3u) << "waiting does not consume; Release does";
  EXPECT_TRUE(mb.failure().ok());
}

TEST(PlanMailbox, FailuresCarryTheirExitCodes) {
  PlanMailbox aborted;
  aborted.Deliver(Plan(7, PlanAction::kAbort));  // no reason given
  EXPECT_EQ(aborted.failure().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(std::string(aborted.failure().message()), "aborted by the coordinator");
  EXPECT_EQ(ExitCodeIn(aborted.failure()), kExitPeerLost);
  aborted.Close(absl::UnavailableError("later"));
  EXPECT_EQ(aborted.failure().code(), absl::StatusCode::kAborted) << "the ABORT plan says more than the end";

  PlanMailbox ended;
  ended.Close(absl::OkStatus());  // the stream ended without a reason
  EXPECT_EQ(ended.failure().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ExitCodeIn(ended.failure()), kExitCoordinatorLost);
  ended.Close(absl::InternalError("second"));
  EXPECT_EQ(ended.closed_status().code(), absl::StatusCode::kUnavailable) << "the first Close counts";
}

TEST(PlanMailbox, WaitForFailureReturnsOnFailureTimeoutOrCancel) {
  PlanMailbox mb;
  EXPECT_TRUE(mb.WaitForFailure(10ms).ok()) << "nothing failed: the timeout ends the wait";

  std::atomic<bool> cancel{false};
  auto cancelled = std::async(std::launch::async, [&] { return mb.WaitForFailure(std::chrono::milliseconds::max(), [&] {
    return cancel.load();
  }); });
  cancel = true;
  mb.Wake();
  ASSERT_EQ(cancelled.wait_for(10s), std::future_status::ready) << "Wake did not end a cancelled wait";
  EXPECT_TRUE(cancelled.get().ok());

  auto failed = std::async(std::launch::async, [&] { return mb.WaitForFailure(std::chrono::milliseconds::max()); });
  mb.Close(absl::UnavailableError("coordinator at 127.0.0.1:1 lost: keepalive"));
  ASSERT_EQ(failed.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(failed.get().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace psync::control
