// PlanFanOut: starts the writes of one plan broadcast (PlanSink::Flush of
// every receiving rank's sink) on a few threads at once instead of one.
//
// Why (measured, bench/README.md "Coordinator (issue 11)"): JobState's own
// work is a few percent of the coordinator's CPU; almost all of it is gRPC
// reading reports and writing N streams (one sendmsg per stream either
// way). Flushed by two threads at once (interleaved halves) instead of one
// in a row, the coordinator had half the context switches per plan, about
// 20% less CPU per iteration and its clients 10-30% less from 64 to 4096
// workers on the 2-core VM, and the fan-out's wall time is shared.
// Small broadcasts (fewer than `min_sinks`) stay on the calling thread: a
// hand-off costs more than it saves there.
//
// Threads: `helpers` threads of its own (fixed; not per worker), started in
// the constructor. FlushAll may be called from any thread, never with a
// lock held that a sink's Flush takes (JobState calls it after releasing
// its lock). Stop() (or the destructor) runs what is queued and joins the
// threads; FlushAll after Stop runs inline.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/plan_sink.h"

namespace psync::server {

class PlanFanOut : public FlushRunner {
 public:
  PlanFanOut(int helpers, size_t min_sinks);
  ~PlanFanOut() override;
  PlanFanOut(const PlanFanOut&) = delete;
  PlanFanOut& operator=(const PlanFanOut&) = delete;

  // Flushes every sink: shares (interleaved) go to the helpers, the caller
  // flushes its own share and returns without waiting for theirs.
  void FlushAll(std::vector<std::shared_ptr<PlanSink>> sinks) override;
  void Stop();

 private:
  using Share = std::vector<std::shared_ptr<PlanSink>>;
  void Run();

  const size_t min_sinks_;
  std::mutex mu_;  // guards queue_ and stop_
  std::condition_variable cv_;
  std::deque<Share> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace psync::server
