// Chrome trace (Trace Event Format) JSON for --trace: opens in Perfetto
// (ui.perfetto.dev) and chrome://tracing.
//
// One process per rank (pid = rank), one track per thread role ("main" for
// forward/backward/optimizer, "autograd" for AccumulateGrad, "comm" for
// bucket reductions). Complete events ("ph":"X") carry ts/dur in
// microseconds since the writer was created. Thread-safe; events are kept in
// memory (bounded) and written at exit.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace psync::runtime {

class TraceWriter {
 public:
  using Clock = std::chrono::steady_clock;
  enum Track : int { kMain = 1, kAutograd = 2, kComm = 3, kControl = 4 };

  TraceWriter(bool enabled, int rank, size_t max_events = 2'000'000);

  bool enabled() const { return enabled_; }
  Clock::time_point Now() const { return Clock::now(); }

  // A span [begin, end) on `track`. args: string key/values shown in the UI.
  void Complete(const std::string& name, const std::string& category, Track track, Clock::time_point begin,
                Clock::time_point end, const std::map<std::string, std::string>& args = {});
  // A zero-length marker.
  void Instant(const std::string& name, const std::string& category, Track track, Clock::time_point at,
               const std::map<std::string, std::string>& args = {});

  // RAII span on `track`: from construction to destruction.
  class Scope {
   public:
    Scope(TraceWriter* w, std::string name, std::string category, Track track = kMain,
          std::map<std::string, std::string> args = {});
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    TraceWriter* w_;
    std::string name_, category_;
    Track track_;
    std::map<std::string, std::string> args_;
    Clock::time_point begin_;
  };

  size_t num_events() const;
  // Writes {"traceEvents": [...], "displayTimeUnit": "ms", ...} to `path`.
  absl::Status Write(const std::string& path) const;

 private:
  struct Event {
    std::string name, category;
    char phase;
    int track;
    int64_t ts_us, dur_us;
    std::map<std::string, std::string> args;
  };
  int64_t Micros(Clock::time_point t) const;

  const bool enabled_;
  const int rank_;
  const size_t max_events_;
  const Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  size_t dropped_ = 0;
};

}  // namespace psync::runtime
