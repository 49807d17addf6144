#include "server/event_log.h"

#include <utility>

namespace psync::server {

void EventLog::Append(v1::EventType type, int rank, int64_t iteration, std::string message) {
  {
    std::lock_guard<std::mutex> l(mu_);
    v1::Event e;
    e.set_seq(next_seq_++);
    e.set_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
    e.set_type(type);
    e.set_rank(rank);
    e.set_iteration(iteration);
    e.set_message(std::move(message));
    events_.push_back(std::move(e));
    while (events_.size() > kKeep) events_.pop_front();
  }
  cv_.notify_all();
}

std::vector<v1::Event> EventLog::WaitAfter(int64_t after_seq, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return closed_ || next_seq_ - 1 > after_seq; });
  std::vector<v1::Event> out;
  for (const auto& e : events_) {
    if (e.seq() > after_seq) out.push_back(e);
  }
  return out;
}

int64_t EventLog::last_seq() const {
  std::lock_guard<std::mutex> l(mu_);
  return next_seq_ - 1;
}

void EventLog::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool EventLog::closed() const {
  std::lock_guard<std::mutex> l(mu_);
  return closed_;
}

}  // namespace psync::server
