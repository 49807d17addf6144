// PlanMailbox: the queue of Plans for one rank's Train stream. JobState
// pushes (under its own lock, from whichever thread completed an iteration);
// the stream's writer thread pops and writes to the wire. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "psync/v1/coordinator.pb.h"

namespace psync::server {

class PlanMailbox {
 public:
  void Push(const v1::Plan& plan) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (closed_) return;
      q_.push_back(plan);
    }
    cv_.notify_all();
  }
  // No more pushes; Pop still drains what is queued.
  void Close() {
    {
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  // Blocks until a plan is queued (true) or the mailbox is closed and empty (false).
  bool Pop(v1::Plan* out) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return closed_ || !q_.empty(); });
    if (q_.empty()) return false;
    *out = std::move(q_.front());
    q_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::Plan> q_;
  bool closed_ = false;
};

}  // namespace psync::server
