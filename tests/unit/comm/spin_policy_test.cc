// SpinPolicy (worker/comm/shm/spin_policy.h): the shm wait's spin window as
// a pure function of the waits recorded so far.
#include "worker/comm/shm/spin_policy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "worker/comm/shm/shm_context.h"

namespace psync::comm::shm {
namespace {

using std::chrono::microseconds;

// Records `n` waits of `us` microseconds, each as the wait would have gone
// with the policy's window at the time: caught by the spin when us <= window,
// else slept (and then measured with a wake-up of `wake_us` added).
void Feed(SpinPolicy& p, int n, int64_t us, int64_t wake_us = 50) {
  for (int i = 0; i < n; ++i) {
    if (us <= p.window().count()) {
      p.Record(microseconds(us), false);
    } else {
      p.Record(microseconds(us + wake_us), true);
    }
  }
}

TEST(SpinPolicy, FixedNeverChanges) {
  SpinPolicy p = SpinPolicy::Fixed(microseconds(75));
  EXPECT_FALSE(p.adaptive());
  EXPECT_EQ(p.window(), microseconds(75));
  Feed(p, 200, 3);
  Feed(p, 200, 5000);
  EXPECT_EQ(p.window(), microseconds(75));
  EXPECT_EQ(p.Describe(), "fixed 75 us");
  EXPECT_EQ(SpinPolicy::Fixed(microseconds(0)).window(), microseconds(0));
}

TEST(SpinPolicy, StartsAtTheInitialWindowUntilWarm) {
  SpinPolicy p = SpinPolicy::Adaptive(8, 2);
  EXPECT_TRUE(p.adaptive());
  EXPECT_TRUE(p.may_spin());
  EXPECT_EQ(p.window(), microseconds(50));
  Feed(p, 7, 3);  // warmup is 8 waits
  EXPECT_EQ(p.window(), microseconds(50));
  Feed(p, 1, 3);
  EXPECT_EQ(p.window(), microseconds(4));
}

TEST(SpinPolicy, PeersThatArriveSoonGetAShortSpinThatCatchesThem) {
  SpinPolicy p = SpinPolicy::Adaptive(8, 2);
  Feed(p, 64, 3);  // bucket [2, 4)
  EXPECT_EQ(p.window(), microseconds(4));
  SpinPolicy q = SpinPolicy::Adaptive(8, 2);
  Feed(q, 64, 20);  // bucket [16, 32)
  EXPECT_EQ(q.window(), microseconds(32));
}

TEST(SpinPolicy, WaitsOfAboutAHundredMicrosecondsAreSpunFor) {
  // Longer than the former fixed 50 us: every one of them paid a wake-up.
  SpinPolicy p = SpinPolicy::Adaptive(8, 2);
  Feed(p, 128, 90);
  EXPECT_EQ(p.window(), microseconds(128));
  EXPECT_GE(p.window(), microseconds(90));
  EXPECT_LE(p.window(), microseconds(200));
}

TEST(SpinPolicy, PeersFarBehindMakeItSleepAtOnce) {
  SpinPolicy p = SpinPolicy::Adaptive(8, 2);
  Feed(p, 64, 2000);
  EXPECT_EQ(p.window(), microseconds(2));
  SpinPolicy q = SpinPolicy::Adaptive(8, 2);
  Feed(q, 64, 300);  // past the bound: spinning would cost more than the wake-up
  EXPECT_EQ(q.window(), microseconds(2));
}

TEST(SpinPolicy, AFastThirdAmongSlowWaitsIsStillCaught) {
  // Bimodal, as in a training step: the first wait of a bucket's allreduce
  // is long (the peer is still in backward), the next ones short.
  SpinPolicy p = SpinPolicy::Adaptive(8, 2);
  for (int i = 0; i < 60; ++i) {
    Feed(p, 1, 5);
    Feed(p, 2, 2000);
  }
  EXPECT_EQ(p.window(), microseconds(8));
}

TEST(SpinPolicy, FollowsTheWaitsWhenTheyChange) {
  SpinPolicy p = SpinPolicy::Adaptive(8, 2);
  Feed(p, 200, 2000);
  ASSERT_EQ(p.window(), microseconds(2));
  // Now the peer comes after 20 us: the first waits sleep (and are measured
  // with the wake-up in them), yet the window grows to catch them.
  Feed(p, 64, 20);
  EXPECT_EQ(p.window(), microseconds(32));
  Feed(p, 200, 2000);
  EXPECT_EQ(p.window(), microseconds(2));
}

TEST(SpinPolicy, AShortWindowDoesNotTalkItselfIntoStayingShort) {
  // Arrivals at 40 us seen through sleeps only (waited = 40 + 50 us wake-up)
  // would look like 90 us waits without the correction; with it the policy
  // sees ~40 us and spins for them.
  SpinPolicy p = SpinPolicy::Adaptive(8, 2);
  Feed(p, 100, 5000);
  ASSERT_EQ(p.window(), microseconds(2));
  Feed(p, 64, 40);
  EXPECT_EQ(p.window(), microseconds(64));
}

TEST(SpinPolicy, MissesGrowTheWindowWhenWakeUpsAreCheaperThanAssumed) {
  // Arrivals at 10 us, wake-ups of 20 us (not the assumed 50): a slept wait
  // measures 30 us, less than the wake-up cost; counted as twice the window
  // it still pushes the window up until the spin catches the peer.
  SpinPolicy p = SpinPolicy::Adaptive(8, 2);
  Feed(p, 100, 5000);
  ASSERT_EQ(p.window(), microseconds(2));
  Feed(p, 64, 10, /*wake_us=*/20);
  EXPECT_GE(p.window(), microseconds(10));
  EXPECT_LE(p.window(), microseconds(32));  // the misses on the way up fade
}

TEST(SpinPolicy, NeverSpinsWithMoreLocalRanksThanCores) {
  SpinPolicy p = SpinPolicy::Adaptive(2, 4);
  EXPECT_FALSE(p.may_spin());
  EXPECT_EQ(p.window(), microseconds(0));
  Feed(p, 100, 3);
  EXPECT_EQ(p.window(), microseconds(0));
  EXPECT_EQ(p.recorded(), 0);
  EXPECT_EQ(p.Describe(), "off: 4 local ranks on 2 usable cores");
  // As many ranks as cores, or cores unknown: spinning is allowed.
  EXPECT_TRUE(SpinPolicy::Adaptive(2, 2).may_spin());
  EXPECT_TRUE(SpinPolicy::Adaptive(0, 64).may_spin());
}

TEST(SpinPolicy, ClampsToTheConfiguredBounds) {
  SpinPolicyConfig c;
  c.min = microseconds(10);
  c.max = microseconds(100);
  c.initial = microseconds(500);
  SpinPolicy p = SpinPolicy::Adaptive(8, 2, c);
  EXPECT_EQ(p.window(), microseconds(100));  // initial clamped
  Feed(p, 64, 1);
  EXPECT_EQ(p.window(), microseconds(10));
  Feed(p, 64, 5000);
  EXPECT_EQ(p.window(), microseconds(10));
  Feed(p, 128, 90);
  EXPECT_EQ(p.window(), microseconds(100));
  EXPECT_EQ(p.Describe(), "adaptive 10..100 us (now 100 us, 256 waits)");
}

TEST(SpinPolicy, IsDeterministic) {
  SpinPolicy a = SpinPolicy::Adaptive(8, 2), b = SpinPolicy::Adaptive(8, 2);
  std::srand(7);
  std::vector<int64_t> waits;
  for (int i = 0; i < 500; ++i) waits.push_back(std::rand() % 400);
  for (int64_t w : waits) {
    const bool slept = w > a.window().count();
    a.Record(microseconds(w), slept);
    b.Record(microseconds(w), slept);
    ASSERT_EQ(a.window(), b.window());
  }
}

TEST(SpinPolicy, Buckets) {
  EXPECT_EQ(SpinPolicy::BucketOf(0), 0);
  EXPECT_EQ(SpinPolicy::BucketOf(0.9), 0);
  EXPECT_EQ(SpinPolicy::BucketOf(1), 1);
  EXPECT_EQ(SpinPolicy::BucketOf(3.9), 2);
  EXPECT_EQ(SpinPolicy::BucketOf(4), 3);
  EXPECT_EQ(SpinPolicy::BucketOf(100), 7);
  EXPECT_EQ(SpinPolicy::BucketOf(1e9), SpinPolicy::kBuckets - 1);
  EXPECT_DOUBLE_EQ(SpinPolicy::BucketValue(0), 0.5);
  EXPECT_DOUBLE_EQ(SpinPolicy::BucketValue(3), 6);  // middle of [4, 8)
  EXPECT_DOUBLE_EQ(SpinPolicy::BucketValue(7), 96);
}

TEST(SpinPolicy, ParseSpinUs) {
  EXPECT_FALSE(ParseSpinUs(nullptr)->has_value());
  EXPECT_FALSE(ParseSpinUs("")->has_value());
  EXPECT_EQ(ParseSpinUs("0")->value(), microseconds(0));
  EXPECT_EQ(ParseSpinUs("75")->value(), microseconds(75));
  for (const char* bad : {"-1", "abc", "5us", "2000000"}) {
    auto r = ParseSpinUs(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find("PSYNC_SHM_SPIN_US"), std::string::npos);
  }
  EXPECT_EQ(ResolveSpin(30)->value(), microseconds(30));
}

TEST(SpinPolicy, EnvironmentOverride) {
  ASSERT_EQ(setenv("PSYNC_SHM_SPIN_US", "25", 1), 0);
  EXPECT_EQ(ResolveSpin(-1)->value(), microseconds(25));
  EXPECT_EQ(ResolveSpin(7)->value(), microseconds(7));  // the option wins
  ASSERT_EQ(setenv("PSYNC_SHM_SPIN_US", "fast", 1), 0);
  EXPECT_EQ(ResolveSpin(-1).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(unsetenv("PSYNC_SHM_SPIN_US"), 0);
  EXPECT_FALSE(ResolveSpin(-1)->has_value());
}

TEST(SpinPolicy, ShmContextUsesTheOverrideOrAdapts) {
  ShmOptions o;
  o.spin = microseconds(30);
  auto fixed = ShmContext::Create(nullptr, {0}, 0, o);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ((*fixed)->spin_policy().Describe(), "fixed 30 us");
  o.spin.reset();
  o.usable_cores = 4;
  auto adaptive = ShmContext::Create(nullptr, {0}, 0, o);
  ASSERT_TRUE(adaptive.ok()) << adaptive.status();
  EXPECT_TRUE((*adaptive)->spin_policy().adaptive());
  EXPECT_EQ((*adaptive)->spin_policy().window(), microseconds(50));
}

TEST(SpinPolicy, UsableCoresIsPositiveHere) { EXPECT_GE(UsableCores(), 1); }

}  // namespace
}  // namespace psync::comm::shm
