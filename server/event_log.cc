#include "server/event_log.h"

#include <algorithm>
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
    e.set_generation(generation_);
    events_.push_back(std::move(e));
    while (events_.size() > kKeep) events_.pop_front();
  }
  Notify();
}

void EventLog::Restore(const std::vector<v1::Event>& kept) {
  std::lock_guard<std::mutex> l(mu_);
  for (const v1::Event& e : kept) {
    if (e.seq() < next_seq_) continue;  // out of order: not from one log
    events_.push_back(e);
    next_seq_ = e.seq() + 1;
    generation_ = std::max(generation_, e.generation());
  }
  while (events_.size() > kKeep) events_.pop_front();
}

void EventLog::SetGeneration(int64_t generation) {
  std::lock_guard<std::mutex> l(mu_);
  generation_ = generation;
}

void EventLog::Notify() {
  std::vector<std::shared_ptr<std::function<void()>>> subs;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, fn] : subscribers_) subs.push_back(fn);
  }
  for (auto& fn : subs) (*fn)();
}

std::vector<v1::Event> EventLog::After(int64_t after_seq) const {
  std::lock_guard<std::mutex> l(mu_);
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

uint64_t EventLog::Subscribe(std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t id = next_sub_++;
  subscribers_.emplace(id, std::make_shared<std::function<void()>>(std::move(fn)));
  return id;
}

void EventLog::Unsubscribe(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  subscribers_.erase(id);
}

void EventLog::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  Notify();
}

bool EventLog::closed() const {
  std::lock_guard<std::mutex> l(mu_);
  return closed_;
}

}  // namespace psync::server
