// Launcher: psync-launch's job on this machine, in steps:
//   Prepare           the signal pipe, the temp folder, the job's token
//   StartCoordinator  psync-coordinator, up to its port file
//   StartRelay        psync-relay for the host's ranks (LaunchOptions::UseRelay)
//   SpawnRanks        one generation of workers (restarts_done_ so far)
//   Supervise         reap, watch the coordinator and the relay, signals,
//                     the grace period, until the generation ends or one of
//                     its failures is restarted (HandleFailure: restart_policy.h)
//   StopServices      the relay, then the coordinator (bounded)
//   Finish            the closing line and the exit status
// Run() strings them together. Processes: child_process.h; what each child
// is started with: child_commands.h.
//
// Exit status (docs/cli-contract.md): the worst of the final generation's
// exit codes (a worker killed by a signal counts as 128+signal), or the
// launcher's own: 1 (fork, pipe, temp folder, token), 3 (the coordinator or
// the relay did not start), 130 (interrupted while they started). Bad flags
// (2) are refused before a Launcher exists (CheckLaunchOptions).
//
// Threads: one (the launcher forks, so it never starts any other, nor
// gRPC); every member belongs to it. Signals arrive through signal_pipe.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/launch/child_commands.h"
#include "client/launch/child_process.h"
#include "client/launch/launch_dir.h"
#include "client/launch/launch_options.h"

namespace psync::launch {

class Launcher {
 public:
  explicit Launcher(LaunchOptions opt);
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // The whole job; returns psync-launch's exit status.
  int Run();

 private:
  using Clock = std::chrono::steady_clock;
  enum class GenerationEnd { kEnded, kRestart };

  // The start steps' errors pick the exit status: Cancelled -> 130,
  // Unavailable -> 3, anything else -> 1.
  absl::Status Prepare();
  absl::Status StartCoordinator();
  absl::Status StartRelay();
  void SpawnRanks();
  GenerationEnd Supervise();
  void StopServices(std::chrono::milliseconds term_wait);
  int Finish() const;

  // Supervise's parts, once per round.
  void WatchService(Child& service, const char* name, bool* reported, bool workers_running);
  // The generation's first failure: restarts it (true: the workers are
  // stopped, start the next generation) or gives the rest `grace`.
  bool HandleFailure();
  void HandleSignals();

  std::vector<Child*> Workers();

  LaunchOptions opt_;  // token filled in by Prepare when it makes one
  LaunchDir dir_;
  bool generated_token_ = false;
  int devnull_ = -1;
  JobAddress address_;
  Child coordinator_{"coordinator", -1, false};
  Child relay_{"psync-relay", -1, false};
  std::vector<Child> workers_;  // the current generation

  // Across generations.
  int interrupts_ = 0;
  int restarts_done_ = 0;
  bool stopping_ = false;  // a stop was asked for (or a service is gone): no more restarts
  bool coordinator_reported_ = false;
  bool relay_reported_ = false;
  int64_t round_ = 0;  // supervision rounds: orders worker failures
  // This generation's.
  std::optional<Clock::time_point> kill_at_;  // when to SIGTERM the workers still running
  bool failure_handled_ = false;
};

}  // namespace psync::launch
