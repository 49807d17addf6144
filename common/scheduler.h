// Scheduler: runs a callback at a point in time. The coordinator's state
// machines (JobState, KvStore) never block a thread to wait for a deadline
// (a Join waiting for the world, a StoreGet waiting for a key, a liveness
// check); they ask a Scheduler to call them back instead. TimerQueue
// (timer_queue.h) is the real one, with one thread; ManualScheduler
// (manual_scheduler.h) lets tests and the fuzzer move time by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace psync {

class Scheduler {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Scheduler() = default;
  // Runs `fn` once, at or soon after `at`, on the scheduler's own thread,
  // never inside RunAt. Returns an id for Cancel (never 0).
  virtual uint64_t RunAt(Clock::time_point at, std::function<void()> fn) = 0;
  // Drops a callback that has not started yet; no effect otherwise.
  virtual void Cancel(uint64_t id) = 0;
  virtual Clock::time_point Now() const { return Clock::now(); }
};

}  // namespace psync
