// EventLog: the job's event history for Control.Watch. Thread-safe: any
// thread appends; Watch handler threads block in WaitAfter. Keeps the last
// kKeep events.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "psync/v1/control.pb.h"

namespace psync::server {

class EventLog {
 public:
  static constexpr size_t kKeep = 1024;

  void Append(v1::EventType type, int rank, int64_t iteration, std::string message);
  // Events with seq > after_seq (oldest first). Waits up to `timeout` for one
  // if there is none yet; returns an empty vector on timeout or after Close().
  std::vector<v1::Event> WaitAfter(int64_t after_seq, std::chrono::milliseconds timeout);
  int64_t last_seq() const;
  // Wakes every waiter (server shutdown).
  void Close();
  bool closed() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::Event> events_;
  int64_t next_seq_ = 1;
  bool closed_ = false;
};

}  // namespace psync::server
