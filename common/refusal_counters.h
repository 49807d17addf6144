// RefusalCounters: how many calls a server refused before reading them
// (no valid token), by method, and a bound on how often that is logged.
// psync-coordinator and psync-relay keep one each (common/token_gate.h
// counts into it); the numbers are what a metrics endpoint will export
// (psync_refused_calls_total{method=...}).
//
// The methods are fixed at construction (the server's own); any other path
// a caller invents counts as "other", so a caller cannot grow the table.
//
// Threads: Count and the readers may run on any thread at once (atomics;
// the log limiter has its own mutex).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace psync {

class RefusalCounters {
 public:
  static constexpr absl::string_view kOther = "other";

  // `methods`: full gRPC paths ("/psync.v1.Control/Status"); `log_every`:
  // at most one log line per this interval (the suppressed count goes into
  // the next line).
  explicit RefusalCounters(std::vector<std::string> methods,
                           std::chrono::milliseconds log_every = std::chrono::seconds(1));

  // Counts one refusal of `method`. Returns true when this one should be
  // logged (rate limit), and then sets `*suppressed` to the refusals not
  // logged since the last logged one.
  bool Count(absl::string_view method, uint64_t* suppressed);

  struct Entry {
    std::string method;
    uint64_t count = 0;
  };
  // Every method (in the order given, "other" last), zeros included.
  std::vector<Entry> Snapshot() const;
  uint64_t Of(absl::string_view method) const;
  uint64_t Total() const;

 private:
  size_t IndexOf(absl::string_view method) const;  // methods_.size() = other

  std::vector<std::string> methods_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // methods_.size() + 1
  const std::chrono::milliseconds log_every_;
  std::mutex log_mu_;  // guards the two below
  std::chrono::steady_clock::time_point last_log_{};
  uint64_t unlogged_ = 0;
};

}  // namespace psync
