// Outbox: what JobState does once its lock is released. Sinks with new
// plans are flushed (through a FlushRunner, or in order on this thread),
// then the callbacks run (Join answers, the generation-end hook). Declared
// before the lock_guard in each public JobState method, so its destructor
// runs after the unlock: nothing that calls out ever holds the job's lock.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "server/plan_sink.h"

namespace psync::server {

class Outbox {
 public:
  Outbox() = default;
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;
  // Plans first: every path that has both pushes its plans before it queues
  // calls (an abort's ABORT plan goes out before the Joins it fails hear it).
  ~Outbox() {
    if (runner_ != nullptr && !flushes_.empty()) {
      runner_->FlushAll(std::move(flushes_));
    } else {
      for (auto& s : flushes_) s->Flush();
    }
    for (auto& f : calls_) f();
  }

  // `sink` has new plans to send; `runner` (may be null) starts the flushes.
  void Flush(std::shared_ptr<PlanSink> sink, FlushRunner* runner) {
    flushes_.push_back(std::move(sink));
    runner_ = runner;
  }
  void Call(std::function<void()> f) { calls_.push_back(std::move(f)); }

 private:
  std::vector<std::shared_ptr<PlanSink>> flushes_;
  FlushRunner* runner_ = nullptr;
  std::vector<std::function<void()>> calls_;
};

}  // namespace psync::server
