// PlanQueue: a PlanSink (plan_sink.h) that keeps the plans in a queue, for
// the unit tests and the fuzzer (the real sink writes a gRPC stream).
// Thread-safe: Pop may wait on another thread than the one pushing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "server/plan_sink.h"

namespace psync::server {

class PlanQueue : public PlanSink {
 public:
  bool Push(PlanPtr plan) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (closed_) return false;
      q_.push_back(std::move(plan));
    }
    cv_.notify_all();
    return false;
  }
  void Close() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  // Waits up to `timeout` for a plan (true), or until the queue is closed
  // and empty or the timeout passed (false).
  bool Pop(v1::Plan* out, std::chrono::milliseconds timeout = std::chrono::hours(1)) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, timeout, [&] { return closed_ || !q_.empty(); });
    if (q_.empty()) return false;
    *out = *q_.front();
    q_.pop_front();
    return true;
  }
  // Non-blocking.
  bool TryPop(v1::Plan* out) { return Pop(out, std::chrono::milliseconds(0)); }
  size_t size() const {
    std::lock_guard<std::mutex> l(mu_);
    return q_.size();
  }
  bool closed() const {
    std::lock_guard<std::mutex> l(mu_);
    return closed_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<PlanPtr> q_;
  bool closed_ = false;
};

}  // namespace psync::server
