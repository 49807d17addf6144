// TimerQueue: the coordinator's one timer thread (Scheduler). Join and
// StoreGet deadlines, the periodic liveness check and (test-only) delayed
// plans all run here, so the number of threads does not grow with workers.
//
// Threads: RunAt / Cancel from any thread (also from a callback); callbacks
// run one at a time on the queue's thread, without the queue's lock held.
// Stop() (or the destructor) drops what has not run and joins the thread.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "common/scheduler.h"

namespace psync {

class TimerQueue : public Scheduler {
 public:
  TimerQueue();
  ~TimerQueue() override;
  uint64_t RunAt(Clock::time_point at, std::function<void()> fn) override;
  void Cancel(uint64_t id) override;
  void Stop();
  size_t pending() const;

 private:
  void Run();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Ordered by (time, id): equal deadlines run in the order they were set.
  std::map<std::pair<Clock::time_point, uint64_t>, std::function<void()>> queue_;
  std::map<uint64_t, Clock::time_point> when_;  // id -> its key in queue_
  uint64_t next_id_ = 1;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace psync
