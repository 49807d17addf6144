// PlanFanOut (server/plan_fanout.h): every sink of a broadcast is flushed
// exactly once; large broadcasts are shared with the helper thread, small
// ones and those after Stop() stay on the caller.
#include "server/plan_fanout.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace psync::server {
namespace {

// Counts its flushes and remembers the threads they ran on.
class CountingSink : public PlanSink {
 public:
  bool Push(PlanPtr) override { return true; }
  void Close() override {}
  void Flush() override {
    std::lock_guard<std::mutex> l(mu_);
    ++flushes_;
    threads_.insert(std::this_thread::get_id());
    cv_.notify_all();
  }
  // Waits (bounded) until flushed once; false on timeout.
  bool WaitFlushed() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(30), [&] { return flushes_ > 0; });
  }
  int flushes() {
    std::lock_guard<std::mutex> l(mu_);
    return flushes_;
  }
  std::set<std::thread::id> threads() {
    std::lock_guard<std::mutex> l(mu_);
    return threads_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int flushes_ = 0;
  std::set<std::thread::id> threads_;
};

std::vector<std::shared_ptr<CountingSink>> MakeSinks(int n) {
  std::vector<std::shared_ptr<CountingSink>> v;
  for (int i = 0; i < n; ++i) v.push_back(std::make_shared<CountingSink>());
  return v;
}

std::vector<std::shared_ptr<PlanSink>> AsSinks(const std::vector<std::shared_ptr<CountingSink>>& v) {
  return {v.begin(), v.end()};
}

TEST(ServerPlanFanOut, LargeBroadcastIsSharedWithTheHelperAndFlushesEachSinkOnce) {
  PlanFanOut fanout(/*helpers=*/1, /*min_sinks=*/32);
  auto sinks = MakeSinks(100);
  fanout.FlushAll(AsSinks(sinks));
  std::set<std::thread::id> used;
  for (auto& s : sinks) {
    ASSERT_TRUE(s->WaitFlushed());
    for (auto t : s->threads()) used.insert(t);
  }
  fanout.Stop();
  for (auto& s : sinks) EXPECT_EQ(s->flushes(), 1);
  EXPECT_EQ(used.size(), 2u);  // the caller and the helper
  EXPECT_EQ(used.count(std::this_thread::get_id()), 1u);
}

TEST(ServerPlanFanOut, SmallBroadcastRunsOnTheCaller) {
  PlanFanOut fanout(/*helpers=*/1, /*min_sinks=*/32);
  auto sinks = MakeSinks(31);
  fanout.FlushAll(AsSinks(sinks));
  for (auto& s : sinks) {  // done already, on this thread
    EXPECT_EQ(s->flushes(), 1);
    EXPECT_EQ(s->threads(), std::set<std::thread::id>{std::this_thread::get_id()});
  }
}

TEST(ServerPlanFanOut, AfterStopEverythingRunsOnTheCaller) {
  PlanFanOut fanout(/*helpers=*/2, /*min_sinks=*/1);
  fanout.Stop();
  auto sinks = MakeSinks(64);
  fanout.FlushAll(AsSinks(sinks));
  for (auto& s : sinks) {
    EXPECT_EQ(s->flushes(), 1);
    EXPECT_EQ(s->threads(), std::set<std::thread::id>{std::this_thread::get_id()});
  }
}

TEST(ServerPlanFanOut, StopRunsWhatIsQueued) {
  auto sinks = MakeSinks(300);
  {
    PlanFanOut fanout(/*helpers=*/3, /*min_sinks=*/1);
    for (int round = 0; round < 3; ++round) {
      std::vector<std::shared_ptr<PlanSink>> part(sinks.begin() + round * 100, sinks.begin() + (round + 1) * 100);
      fanout.FlushAll(std::move(part));
    }
  }  // the destructor stops: queued shares still run
  for (auto& s : sinks) EXPECT_EQ(s->flushes(), 1);
}

}  // namespace
}  // namespace psync::server
