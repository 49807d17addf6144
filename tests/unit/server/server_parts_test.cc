// Small parts of the coordinator: the timer thread, the listen policy, the
// token comparison, the liveness rules on made-up times.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "server/auth.h"
#include "server/listen_policy.h"
#include "server/liveness_policy.h"
#include "common/timer_queue.h"

namespace psync::server {
namespace {

using namespace std::chrono_literals;

TEST(TimerQueue, RunsInDeadlineOrderAndCancels) {
  TimerQueue q;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  auto add = [&](int v) {
    std::lock_guard<std::mutex> l(mu);
    order.push_back(v);
    cv.notify_all();
  };
  const auto t = Scheduler::Clock::now() + 50ms;
  q.RunAt(t + 20ms, [&] { add(3); });
  q.RunAt(t, [&] { add(1); });
  const uint64_t dropped = q.RunAt(t + 10ms, [&] { add(99); });
  q.RunAt(t + 10ms, [&] { add(2); });
  q.Cancel(dropped);
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return order.size() == 3; }));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_GE(Scheduler::Clock::now(), t + 20ms) << "ran before its deadline";
}

TEST(TimerQueue, CallbackMaySchedule) {
  TimerQueue q;
  std::mutex mu;
  std::condition_variable cv;
  int n = 0;
  std::function<void()> tick = [&] {
    std::lock_guard<std::mutex> l(mu);
    if (++n < 3) q.RunAt(Scheduler::Clock::now(), tick);
    cv.notify_all();
  };
  q.RunAt(Scheduler::Clock::now(), tick);
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return n == 3; }));
}

TEST(ListenPolicy, LoopbackOnlyWithoutToken) {
  for (const char* h : {"127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
    EXPECT_TRUE(CheckListenPolicy(h, "", false).ok()) << h;
  }
  for (const char* h : {"0.0.0.0", "::", "[::]", "10.0.0.1", "example.com", "128.0.0.1", ""}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
    absl::Status st = CheckListenPolicy(h, "", false);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << h;
    EXPECT_NE(std::string(st.message()).find("--allow-unauthenticated"), std::string::npos) << st;
    EXPECT_TRUE(CheckListenPolicy(h, "secret", false).ok()) << h;
    EXPECT_TRUE(CheckListenPolicy(h, "", true).ok()) << h;
  }
}

TEST(TokenEquals, ExactMatchOnly) {
  EXPECT_TRUE(TokenEquals("s3cret", "s3cret"));
  EXPECT_FALSE(TokenEquals("s3cre", "s3cret"));     // prefix
  EXPECT_FALSE(TokenEquals("s3cret!", "s3cret"));   // longer
  EXPECT_FALSE(TokenEquals("s3cret", "S3cret"));
  EXPECT_FALSE(TokenEquals("s3crets3cret", "s3cret"));  // the secret repeated (it is cycled internally)
  EXPECT_FALSE(TokenEquals("", "s3cret"));
  EXPECT_FALSE(TokenEquals("", ""));                // an empty secret never matches
  EXPECT_FALSE(TokenEquals("x", ""));
}

TEST(BearerTokenMatches, NeedsTheSchemeAndTheExactToken) {
  EXPECT_TRUE(BearerTokenMatches("Bearer s3cret", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("s3cret", "s3cret"));          // no scheme
  EXPECT_FALSE(BearerTokenMatches("bearer s3cret", "s3cret"));   // the scheme as sent by psync clients
  EXPECT_FALSE(BearerTokenMatches("Bearer  s3cret", "s3cret"));  // one space
  EXPECT_FALSE(BearerTokenMatches("Bearer s3cre", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("Bearer ", ""));
}

TEST(LivenessPolicy, RulesOnMadeUpTimes) {
  using Phase = RankActivity::Phase;
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  LivenessParams p{3000ms, 1500ms, 375ms};
  std::vector<RankActivity> ranks(3);
  for (auto& r : ranks) {
    r.phase = Phase::kTraining;
    r.last_heard = r.last_activity = t0;
  }
  EXPECT_FALSE(JudgeLiveness(ranks, p, t0 + 100ms, t0, t0, 4));
  ranks[2].last_heard = t0 - 1000ms;  // silent longest
  ranks[1].last_heard = t0 - 500ms;
  auto v = JudgeLiveness(ranks, p, t0 + 1000ms, t0, t0, 4);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->rank, 2);
  EXPECT_EQ(v->why,
            "no message (heartbeat or report) for 2s, beyond the heartbeat timeout of 1500ms (process or "
            "connection gone) at iteration 4");
  // Report rule: everyone heard recently, rank 0 has reported, rank 1 not.
  for (auto& r : ranks) r.last_heard = t0 + 3100ms;
  ranks[0].reported_pending = true;
  ranks[2].reported_pending = true;
  v = JudgeLiveness(ranks, p, t0 + 3200ms, t0, t0, 4);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->rank, 1);
  EXPECT_EQ(v->why, "no report for iteration 4 within 3s (still heartbeating)");
  // ... but not while some rank is quiet (two heartbeats missed).
  ranks[0].last_heard = t0 + 3200ms - 800ms;
  EXPECT_FALSE(JudgeLiveness(ranks, p, t0 + 3200ms, t0, t0, 4));
}

}  // namespace
}  // namespace psync::server
