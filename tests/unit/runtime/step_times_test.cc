// worker/runtime/step_times.h: the progress line's recent median and the
// summary's quantiles cost the same work per step at step 10^6 as at 10^3
// (counted, not timed); before, every progress line copied and sorted all
// step times so far.
#include "worker/runtime/step_times.h"

#include <gtest/gtest.h>

#include <cmath>

namespace psync::runtime {
namespace {

// `steps` more steps with a progress line every 10 (as psync-worker's
// default --progress-every); the work they took.
int64_t RunSteps(StepTimes* t, int64_t steps) {
  const int64_t before = t->work();
  for (int64_t i = 0; i < steps; ++i) {
    t->Add(10.0 + static_cast<double>(i % 7));
    if (t->count() % 10 == 0) (void)t->RecentMedian();
  }
  return t->work() - before;
}

TEST(StepTimes, WorkPerStepIsFlatFromAThousandToAMillionSteps) {
  StepTimes t;
  RunSteps(&t, 1000);
  const int64_t early = RunSteps(&t, 10000);  // steps 1,000 .. 11,000
  RunSteps(&t, 1000000 - 11000);
  const int64_t late = RunSteps(&t, 10000);   // steps 1,000,000 .. 1,010,000
  EXPECT_EQ(t.count(), 1010000);
  // Per 10 steps: 10 adds + one window of kWindow values; the switch to the
  // histogram (4096 values once) falls in the early span.
  EXPECT_LE(late, early) << "per-step work grew with the step count";
  EXPECT_EQ(late, 10000 + 1000 * static_cast<int64_t>(StepTimes::kWindow));
}

TEST(StepTimes, RecentMedianIsTheMedianOfTheLastWindow) {
  StepTimes t;
  EXPECT_TRUE(std::isnan(t.RecentMedian()));
  for (int i = 0; i < 5000; ++i) t.Add(1000.0);  // a slow start
  for (size_t i = 0; i < StepTimes::kWindow; ++i) t.Add(static_cast<double>(i % 10));
  EXPECT_DOUBLE_EQ(t.RecentMedian(), 4.5);  // only the last kWindow steps
  EXPECT_NEAR(t.Median(), 1000.0, 10.0);    // the whole run (timed steps, within 1%)
}

}  // namespace
}  // namespace psync::runtime
