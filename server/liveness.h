// LivenessTicker: calls JobState::CheckLiveness about every `period` on the
// coordinator's Scheduler (no thread of its own). Stop() ends it; after Stop
// returns, no check starts any more.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include "server/job_state.h"
#include "common/scheduler.h"

namespace psync::server {

class LivenessTicker {
 public:
  LivenessTicker(JobState* job, Scheduler* scheduler, std::chrono::milliseconds period);
  ~LivenessTicker();
  void Stop();

 private:
  void Tick();
  JobState* job_;
  Scheduler* scheduler_;
  const std::chrono::milliseconds period_;
  std::mutex mu_;  // guards stopped_ and timer_; held during a check so Stop waits for it
  bool stopped_ = false;
  uint64_t timer_ = 0;
};

}  // namespace psync::server
