// How the worker learns the job is lost: the plan mailbox's failure (an
// ABORT plan, or the Train stream's end, each with its exit code) and the
// FailureWatchdog that aborts the group and bounds the exit.
#include "worker/control/failure_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <string>

#include "psync/common/exit_code.h"
#include "worker/control/plan_mailbox.h"

namespace psync::control {
namespace {

using namespace std::chrono_literals;

IterationPlan Abort(int64_t it, std::string reason) {
  IterationPlan p;
  p.iteration = it;
  p.action = PlanAction::kAbort;
  p.reason = std::move(reason);
  return p;
}

TEST(PlanMailboxFailure, AbortPlanIsTheFailureWithExitCode4) {
  PlanMailbox mb;
  EXPECT_TRUE(mb.failure().ok());
  EXPECT_TRUE(mb.WaitForFailure(10ms).ok()) << "nothing failed: the wait times out with OK";
  auto waiter = std::async(std::launch::async, [&] { return mb.WaitForFailure(10s); });
  mb.Deliver(Abort(7, "rank 1 (h:1) lost: stream closed"));
  const absl::Status f = waiter.get();
  EXPECT_EQ(f.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(f.message(), "rank 1 (h:1) lost: stream closed");
  EXPECT_EQ(ExitCodeOf(f, 0), kExitPeerLost);
  // A later close does not replace the ABORT as the reason.
  mb.Close(WithExitCode(absl::UnavailableError("coordinator at x lost"), kExitCoordinatorLost));
  EXPECT_EQ(mb.failure().message(), "rank 1 (h:1) lost: stream closed");
  EXPECT_EQ(mb.Wait(8, 1s).status().message(), "rank 1 (h:1) lost: stream closed");
  PlanMailbox unnamed;
  unnamed.Deliver(Abort(0, ""));
  EXPECT_EQ(unnamed.failure().message(), "aborted by the coordinator");
}

TEST(PlanMailboxFailure, CloseCarriesTheClientsStatusOrCoordinatorLost) {
  PlanMailbox lost;
  lost.Close(WithExitCode(absl::AbortedError("coordinator at x ended the Train stream: job aborted"), kExitPeerLost));
  EXPECT_EQ(ExitCodeOf(lost.WaitForFailure(1s), 0), kExitPeerLost);
  PlanMailbox ended;
  ended.Close(absl::OkStatus());
  EXPECT_EQ(ended.failure().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ExitCodeOf(ended.failure(), 0), kExitCoordinatorLost);
}

TEST(PlanMailboxFailure, WakeEndsAWaitWhoseCallerCancelled) {
  PlanMailbox mb;
  std::atomic<bool> cancelled{false};
  auto waiter = std::async(std::launch::async, [&] {
    return mb.WaitForFailure(std::chrono::milliseconds::max(), [&] { return cancelled.load(); });
  });
  EXPECT_EQ(waiter.wait_for(50ms), std::future_status::timeout);
  cancelled = true;
  mb.Wake();
  EXPECT_TRUE(waiter.get().ok());
}

// Records the reasons the watchdog aborted with.
struct Aborts {
  std::mutex mu;
  std::vector<std::string> reasons;
  std::promise<void> first;
  FailureWatchdog::AbortFn Fn() {
    return [this](const absl::Status& st) {
      std::lock_guard<std::mutex> l(mu);
      reasons.push_back(std::string(st.message()));
      if (reasons.size() == 1) first.set_value();
    };
  }
};

TEST(FailureWatchdog, AbortsTheGroupOnFailureAndStopsWithoutExiting) {
  auto mb = std::make_shared<PlanMailbox>();
  Aborts aborts;
  FailureWatchdog dog(mb, aborts.Fn(), 60s);
  mb->Close(WithExitCode(absl::UnavailableError("coordinator at x lost: UNAVAILABLE: gone"), kExitCoordinatorLost));
  ASSERT_EQ(aborts.first.get_future().wait_for(10s), std::future_status::ready);
  dog.Stop();  // the training thread stopped in time: the process lives on
  std::lock_guard<std::mutex> l(aborts.mu);
  ASSERT_EQ(aborts.reasons.size(), 1u);
  EXPECT_EQ(aborts.reasons[0], "coordinator lost: coordinator at x lost: UNAVAILABLE: gone");
}

TEST(FailureWatchdog, StoppedBeforeAnyFailureNeverAborts) {
  auto mb = std::make_shared<PlanMailbox>();
  Aborts aborts;
  {
    FailureWatchdog dog(mb, aborts.Fn(), 10ms);
    dog.Stop();
  }
  mb->Deliver(Abort(0, "too late"));
  std::lock_guard<std::mutex> l(aborts.mu);
  EXPECT_TRUE(aborts.reasons.empty());
}

TEST(FailureWatchdogDeathTest, ExitsWithTheFailuresCodeWhenTrainingDoesNotStop) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto mb = std::make_shared<PlanMailbox>();
        FailureWatchdog dog(mb, nullptr, 50ms);
        mb->Deliver(Abort(3, "rank 2 (h:2) lost: stream closed"));
        std::promise<void>().get_future().wait();  // the training thread, stuck
      },
      ::testing::ExitedWithCode(kExitPeerLost),
      "psync-worker: job aborted: rank 2 \\(h:2\\) lost: stream closed \\(training thread did not stop; exiting\\)");
  EXPECT_EXIT(
      {
        auto mb = std::make_shared<PlanMailbox>();
        FailureWatchdog dog(mb, nullptr, 50ms);
        mb->Close(WithExitCode(absl::UnavailableError("coordinator at x lost: gone"), kExitCoordinatorLost));
        std::promise<void>().get_future().wait();
      },
      ::testing::ExitedWithCode(kExitCoordinatorLost), "psync-worker: coordinator lost: coordinator at x lost: gone");
}

}  // namespace
}  // namespace psync::control
