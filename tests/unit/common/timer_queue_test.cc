// TimerQueue (common/timer_queue.h): the real Scheduler's one timer thread
// runs callbacks in deadline order, cancels, and lets a callback schedule.
#include "common/timer_queue.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

namespace psync {
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

}  // namespace
}  // namespace psync
