// ManualScheduler: a Scheduler whose clock only moves when told to, for
// tests and the fuzzer: RunUntil(t) sets the clock to t and runs every
// callback due by then (also ones scheduled by those callbacks), in time
// order. Not thread-safe: one test thread drives it.
#pragma once

#include <map>
#include <utility>

#include "common/scheduler.h"

namespace psync {

class ManualScheduler : public Scheduler {
 public:
  explicit ManualScheduler(Clock::time_point start = Clock::now()) : now_(start) {}
  uint64_t RunAt(Clock::time_point at, std::function<void()> fn) override {
    const uint64_t id = next_id_++;
    queue_.emplace(std::make_pair(at, id), std::move(fn));
    return id;
  }
  void Cancel(uint64_t id) override {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->first.second == id) {
        queue_.erase(it);
        return;
      }
    }
  }
  Clock::time_point Now() const override { return now_; }
  // Advances the clock to `t` (never backwards) running what is due.
  void RunUntil(Clock::time_point t) {
    while (!queue_.empty() && queue_.begin()->first.first <= t) {
      auto first = queue_.begin();
      if (first->first.first > now_) now_ = first->first.first;
      std::function<void()> fn = std::move(first->second);
      queue_.erase(first);
      fn();
    }
    if (t > now_) now_ = t;
  }
  void Advance(Clock::duration d) { RunUntil(now_ + d); }
  size_t pending() const { return queue_.size(); }

 private:
  Clock::time_point now_;
  uint64_t next_id_ = 1;
  std::map<std::pair<Clock::time_point, uint64_t>, std::function<void()>> queue_;
};

}  // namespace psync
