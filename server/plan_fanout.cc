#include "server/plan_fanout.h"

#include <utility>

namespace psync::server {

PlanFanOut::PlanFanOut(int helpers, size_t min_sinks) : min_sinks_(min_sinks) {
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { Run(); });
}

PlanFanOut::~PlanFanOut() { Stop(); }

void PlanFanOut::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void PlanFanOut::FlushAll(std::vector<std::shared_ptr<PlanSink>> sinks) {
  const size_t parts = threads_.size() + 1;
  bool inline_all = sinks.size() < min_sinks_ || parts == 1;
  if (!inline_all) {
    // Interleaved shares: neighbouring ranks (often one connection) are
    // written by different threads at the same moment.
    std::vector<Share> shares(parts);
    for (size_t i = 0; i < sinks.size(); ++i) shares[i % parts].push_back(std::move(sinks[i]));
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) {
        inline_all = true;
      } else {
        for (size_t p = 1; p < parts; ++p) queue_.push_back(std::move(shares[p]));
      }
    }
    if (inline_all) {
      for (auto& s : shares) {
        for (auto& sink : s) sink->Flush();
      }
      return;
    }
    cv_.notify_all();
    for (auto& sink : shares[0]) sink->Flush();
    return;
  }
  for (auto& sink : sinks) sink->Flush();
}

void PlanFanOut::Run() {
  for (;;) {
    Share share;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      share = std::move(queue_.front());
      queue_.pop_front();
    }
    for (auto& sink : share) sink->Flush();
  }
}

}  // namespace psync::server
