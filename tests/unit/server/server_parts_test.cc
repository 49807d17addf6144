// Small parts of the coordinator: the listen policy and the liveness rules
// on made-up times. (common/'s timer queue and tokens: tests/unit/common.)
#include <gtest/gtest.h>

#include <vector>

#include "server/listen_policy.h"
#include "server/liveness_policy.h"

namespace psync::server {
namespace {

using namespace std::chrono_literals;

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
