// StatusPoller: `psyncctl --json status` in the background, for a node's
// launcher that follows its job's coordinator (coordinator_view.h). The
// launcher forks, so it never speaks gRPC itself; and it has one thread,
// which must keep reaping workers and taking signals while the coordinator
// answers (or does not: psyncctl's own --timeout bounds each probe). So a
// probe is a child process whose stdout and stderr go to files, collected
// in a later supervision round.
//
// Threads: the launcher's main thread only.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/launch/child_commands.h"
#include "client/launch/child_process.h"
#include "client/launch/coordinator_view.h"

namespace psync::launch {

class StatusPoller {
 public:
  // `status`: StatusCommand; `out_file` / `err_file`: where each probe's
  // stdout / stderr go (in the launcher's temp folder).
  StatusPoller(Command status, std::string out_file, std::string err_file);
  ~StatusPoller();
  StatusPoller(const StatusPoller&) = delete;
  StatusPoller& operator=(const StatusPoller&) = delete;

  // Once per supervision round, never blocks: the answer of a probe that
  // ended since the last call, if one did; starts the next probe when none
  // runs and `every` passed since the last one started. The error is
  // Unavailable when the coordinator could not be reached, Internal when
  // psyncctl could not run, else what the coordinator answered (a wrong
  // token) or what was wrong with the output.
  std::optional<absl::StatusOr<CoordinatorView>> Tick(std::chrono::milliseconds every);

 private:
  using Clock = std::chrono::steady_clock;
  absl::StatusOr<CoordinatorView> Collect() const;

  const Command status_;
  const std::string out_file_, err_file_;
  Child probe_{"psyncctl status", -1, false};
  std::optional<Clock::time_point> last_start_;
};

}  // namespace psync::launch
