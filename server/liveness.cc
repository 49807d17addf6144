#include "server/liveness.h"

namespace psync::server {

Liveness::Liveness(JobState* job, std::chrono::milliseconds period)
    : job_(job), period_(period), thread_([this] { Run(); }) {}

Liveness::~Liveness() { Stop(); }

void Liveness::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Liveness::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    cv_.wait_for(l, period_, [&] { return stop_; });
    if (stop_) break;
    l.unlock();
    job_->CheckLiveness(JobState::Clock::now());
    l.lock();
  }
}

}  // namespace psync::server
