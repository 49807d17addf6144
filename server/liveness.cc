#include "server/liveness.h"

namespace psync::server {

LivenessTicker::LivenessTicker(JobState* job, Scheduler* scheduler, std::chrono::milliseconds period)
    : job_(job), scheduler_(scheduler), period_(period) {
  std::lock_guard<std::mutex> l(mu_);
  timer_ = scheduler_->RunAt(scheduler_->Now() + period_, [this] { Tick(); });
}

LivenessTicker::~LivenessTicker() { Stop(); }

void LivenessTicker::Stop() {
  std::lock_guard<std::mutex> l(mu_);
  stopped_ = true;
  scheduler_->Cancel(timer_);
}

void LivenessTicker::Tick() {
  std::lock_guard<std::mutex> l(mu_);
  if (stopped_) return;
  job_->CheckLiveness(JobState::Clock::now(), /*ticker=*/true);
  timer_ = scheduler_->RunAt(scheduler_->Now() + period_, [this] { Tick(); });
}

}  // namespace psync::server
