#include "common/timer_queue.h"

namespace psync {

TimerQueue::TimerQueue() : thread_([this] { Run(); }) {}

TimerQueue::~TimerQueue() { Stop(); }

uint64_t TimerQueue::RunAt(Clock::time_point at, std::function<void()> fn) {
  uint64_t id;
  bool earliest;
  {
    std::lock_guard<std::mutex> l(mu_);
    id = next_id_++;
    if (stop_) return id;
    queue_.emplace(std::make_pair(at, id), std::move(fn));
    when_.emplace(id, at);
    earliest = queue_.begin()->first.second == id;
  }
  if (earliest) cv_.notify_all();  // the thread may sleep until a later deadline
  return id;
}

void TimerQueue::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return;
  queue_.erase(std::make_pair(it->second, id));
  when_.erase(it);
}

void TimerQueue::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    queue_.clear();
    when_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

size_t TimerQueue::pending() const {
  std::lock_guard<std::mutex> l(mu_);
  return queue_.size();
}

void TimerQueue::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(l);
      continue;
    }
    auto first = queue_.begin();
    if (Clock::now() < first->first.first) {
      cv_.wait_until(l, first->first.first);
      continue;
    }
    std::function<void()> fn = std::move(first->second);
    when_.erase(first->first.second);
    queue_.erase(first);
    l.unlock();
    fn();
    l.lock();
  }
}

}  // namespace psync
