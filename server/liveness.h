// Liveness: a thread that calls JobState::CheckLiveness about every
// `period`. Owns its thread; Stop() (or the destructor) joins it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "server/job_state.h"

namespace psync::server {

class Liveness {
 public:
  Liveness(JobState* job, std::chrono::milliseconds period);
  ~Liveness();
  void Stop();

 private:
  void Run();
  JobState* job_;
  const std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace psync::server
