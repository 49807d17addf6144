// KvStore: the key-value store workers bootstrap Gloo / NCCL through.
// A Get of a key that is not there yet waits without a thread: the caller's
// callback runs later, from the Set that adds the key, from the scheduler
// at the deadline, from Cancel, or from Close.
//
// Threads: every method is thread-safe (one mutex, mu_, guards kv_ and
// waiters_). Callbacks always run after mu_ is released, on the thread of
// the call that completed them (Set, Cancel, Close, or the scheduler's).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "common/scheduler.h"

namespace psync::server {

class KvStore {
 public:
  using GetDone = std::function<void(absl::StatusOr<std::string>)>;

  // `scheduler` runs Get deadlines; it must outlive the store.
  explicit KvStore(Scheduler* scheduler) : scheduler_(scheduler) {}

  // InvalidArgument for keys/values over the limits (server/limits.h);
  // ResourceExhausted when the store already holds kMaxKeysPerJob keys.
  absl::Status Set(const std::string& key, std::string value);
  // Calls `done` exactly once: with the value as soon as `key` exists
  // (maybe before Get returns), DeadlineExceeded naming the key after
  // `timeout`, Cancelled after Cancel, Unavailable after Close. Returns a
  // ticket for Cancel (0 when `done` already ran).
  uint64_t Get(const std::string& key, std::chrono::milliseconds timeout, GetDone done);
  // The waiting Get with this ticket ends with Cancelled (the client went away).
  void Cancel(uint64_t ticket);
  // Drops every stored key that starts with `prefix` (the keys of a job
  // generation that ended, so restarts do not fill the store); waiting Gets
  // are left alone. Returns how many keys were dropped.
  size_t ErasePrefix(const std::string& prefix);
  // Ends every waiting Get with Unavailable and refuses new ones (server shutdown).
  void Close();
  size_t size() const;
  size_t waiting() const;

 private:
  struct Waiter {
    std::string key;
    GetDone done;
    uint64_t timer = 0;
    std::chrono::milliseconds timeout{0};
  };
  // Removes the waiter (under mu_); returns its callback, or null if gone.
  GetDone TakeLocked(uint64_t ticket, uint64_t* timer);
  void Expire(uint64_t ticket);

  Scheduler* const scheduler_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> kv_;
  std::map<uint64_t, Waiter> waiters_;             // by ticket
  std::multimap<std::string, uint64_t> by_key_;    // key -> tickets waiting for it
  uint64_t next_ticket_ = 1;
  bool closed_ = false;
};

}  // namespace psync::server
