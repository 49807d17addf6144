// EventLog: the job's event history for Control.Watch. Keeps the last kKeep
// events. Watchers subscribe to be told when there is something new, and
// read it with After(); nobody blocks a thread on it.
//
// Threads: thread-safe (mu_ guards events_ and the subscriber list). Append
// is called with JobState's lock held, and runs the subscribers' callbacks
// (after releasing mu_): they must only queue work, never call JobState.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "psync/v1/control.pb.h"

namespace psync::server {

class EventLog {
 public:
  static constexpr size_t kKeep = 1024;

  // The event is stamped with the generation last given to SetGeneration (1 at first).
  void Append(v1::EventType type, int rank, int64_t iteration, std::string message);
  // The job generation of the events appended from now on (JobState, on a restart).
  void SetGeneration(int64_t generation);
  // Before any Append: continues an earlier coordinator's log (the events it
  // kept, oldest first, with their seq: a watcher that reconnects goes on
  // from the seq it saw; server/job_journal.h).
  void Restore(const std::vector<v1::Event>& kept);
  // Events with seq > after_seq that are still kept, oldest first.
  std::vector<v1::Event> After(int64_t after_seq) const;
  int64_t last_seq() const;
  // `fn` runs after every Append and after Close. Returns an id for Unsubscribe.
  uint64_t Subscribe(std::function<void()> fn);
  void Unsubscribe(uint64_t id);
  // No more events (server shutdown); subscribers are told once more.
  void Close();
  bool closed() const;

 private:
  void Notify();
  mutable std::mutex mu_;
  std::deque<v1::Event> events_;
  int64_t next_seq_ = 1;
  int64_t generation_ = 1;
  bool closed_ = false;
  std::map<uint64_t, std::shared_ptr<std::function<void()>>> subscribers_;
  uint64_t next_sub_ = 1;
};

// True for the events after which a job never changes again (not
// EVENT_RESTARTING or EVENT_REGROUPED: the job goes on with its next generation).
inline bool IsFinalEvent(const v1::Event& e) {
  return e.type() == v1::EVENT_FINISHED || e.type() == v1::EVENT_ABORTED;
}

}  // namespace psync::server
