// PlanSink: where JobState delivers the Plans of one Train stream's ranks
// (one rank, or several on a host stream; coordinator.proto "Host streams"). The Train stream's
// reactor (train_reactor.h) is the real one; PlanMailbox is a plain queue
// for tests and the fuzzer.
//
// JobState calls Push and Close with its own lock held, so that plans reach
// every sink in iteration order; implementations only queue there (no
// blocking, no call back into JobState). When Push returns true, JobState
// calls Flush after releasing its lock, and that is where a sink starts
// sending (e.g. a gRPC write), so slow sends never hold the job's lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "psync/v1/coordinator.pb.h"

namespace psync::server {

using PlanPtr = std::shared_ptr<const v1::Plan>;  // one Plan object shared by every rank's sink

class PlanSink {
 public:
  virtual ~PlanSink() = default;
  // Queues `plan`; true = call Flush() once the job's lock is released.
  virtual bool Push(PlanPtr plan) = 0;
  // No more plans will be pushed; what is queued still goes out.
  virtual void Close() = 0;
  virtual void Flush() {}

  // JobState's bookkeeping, guarded by JobState's lock (a sink never reads
  // or writes these). A host stream's sink serves several ranks:
  // job_ranks counts the ranks whose plans still go here (Close() runs when
  // the last one is released), and job_last_broadcast is the broadcast that
  // last pushed here, so each plan reaches a host stream once, not once per rank.
  int job_ranks = 0;
  uint64_t job_last_broadcast = 0;
};

// Runs the Flush() of many sinks (one plan broadcast, after JobState has
// released its lock). Without one, JobState flushes them in order on the
// calling thread; PlanFanOut (plan_fanout.h) spreads them over a few threads.
class FlushRunner {
 public:
  virtual ~FlushRunner() = default;
  virtual void FlushAll(std::vector<std::shared_ptr<PlanSink>> sinks) = 0;
};

// A queue with a blocking Pop. Thread-safe.
class PlanMailbox : public PlanSink {
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
  // Waits up to `timeout` for a plan (true), or until the mailbox is closed
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
