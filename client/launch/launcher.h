// Launcher: psync-launch's job on this machine, in steps:
//   Prepare           the signal pipe, the temp folder, the job's token
//   StartCoordinator  psync-coordinator, up to its port file (StartsCoordinator)
//   JoinJob           node mode: waits for the job's coordinator to answer;
//                     elastic: a job running without this node regroups first
//                     (RegroupIn), so its ranks join the next generation
//   StartRelay        psync-relay for the host's ranks (LaunchOptions::UseRelay)
//   SpawnRanks        one generation of this node's workers (restarts_done_ so far)
//   Supervise         reap, watch the coordinator (started again when it
//                     dies: RestartCoordinator) and the relay, signals,
//                     the grace period, until the generation ends or is
//                     restarted: on one host alone the launcher decides
//                     (HandleFailure: restart_policy.h); in node mode the
//                     coordinator does (FollowJob: coordinator_view.h)
//   KeepCoordinatorUntilJobEnds  node 0 of several: the other nodes' ranks
//                     may still be finishing
//   StopServices      the relay, then the coordinator (bounded)
//   Finish            the closing line and the exit status
// Run() strings them together. Processes: child_process.h; what each child
// is started with: child_commands.h.
//
// Exit status (docs/cli-contract.md): the worst of the final generation's
// exit codes (a worker killed by a signal counts as 128+signal), or the
// launcher's own: 1 (fork, pipe, temp folder, token), 2 (node mode: the
// coordinator's job has another world size), 3 (the coordinator or the
// relay did not start; node mode: the coordinator did not answer within
// --join-timeout, refused this node, or its job is over), 130 (interrupted
// while they started). Bad flags (2) are refused before a Launcher exists
// (CheckLaunchOptions).
//
// Threads: one (the launcher forks, so it never starts any other, nor
// gRPC); every member belongs to it. Signals arrive through signal_pipe.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/launch/child_commands.h"
#include "client/launch/child_process.h"
#include "client/launch/launch_dir.h"
#include "client/launch/launch_options.h"
#include "client/launch/restart_policy.h"
#include "client/launch/status_poller.h"

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
  absl::Status JoinJob();
  absl::StatusOr<CoordinatorView> WaitForCoordinator();
  absl::StatusOr<CoordinatorView> RegroupIn(const CoordinatorView& running);
  absl::Status StartRelay();
  void SpawnRanks();
  // (Re)starts local rank `local` of this node with `flags`.
  void SpawnRank(int local, const std::vector<std::string>& flags);
  // Live recovery on one host: starts every failed worker again alone (the
  // others keep running); false when a failure may not be replaced
  // (HandleFailure then ends the generation as without live recovery).
  bool ReplaceFailedWorkers();
  // Live recovery in node mode: starts again every worker of this node that
  // ended with a failure (`consequences_only`: exit 4 or 5 only); `what`
  // says why, in its line.
  void RestartEndedWorkers(const char* what, bool consequences_only);
  GenerationEnd Supervise();
  void KeepCoordinatorUntilJobEnds();
  void StopServices(std::chrono::milliseconds term_wait);
  int Finish() const;

  // Supervise's parts, once per round.
  // A service gone: the coordinator is started again while workers run
  // (RestartCoordinator), else the workers get `grace` to stop.
  void WatchService(Child& service, const char* name, bool* reported, bool workers_running);
  // psync-coordinator on `port` (0: any), up to its port file: the port.
  absl::StatusOr<int> SpawnCoordinator(int port);
  // Coordinator failover: this launcher's coordinator died while its
  // workers run; starts it again on the same port, at most
  // kCoordinatorRestarts times (false: not, or it did not start).
  static constexpr int kCoordinatorRestarts = 10;
  bool RestartCoordinator();
  // One host alone: the generation's first failure restarts it (true: the
  // workers are stopped, start the next generation) or gives the rest `grace`.
  bool HandleFailure();
  // Node mode: the coordinator's verdict on this node's generation (true:
  // it opened the next one and this node's workers are stopped).
  bool FollowJob(bool any_running);
  // The generation may end once its workers did: always on one host; in
  // node mode once the coordinator gave its verdict, or the node stops.
  bool Settled() const { return !opt_.NodeMode() || verdict_reached_ || stopping_; }
  void HandleSignals();
  // Elastic node mode, SIGTERM (a drained pod): asks the coordinator to
  // regroup without this node; false when it could not (then the job stops).
  bool LeaveJob();

  std::vector<Child*> Workers();
  // How this generation's ended workers ended, by global rank.
  std::vector<WorkerEnd> WorkerEnds() const;
  const Child& WorkerOfRank(int rank) const { return workers_[static_cast<size_t>(rank - opt_.FirstRank())]; }

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
  int restarts_done_ = 0;   // node mode: the coordinator's count (the job's), else this launcher's
  bool replacing_ = false;  // live recovery: the last loss was replaced, so its consequences are started again free
  bool followed_live_ = false;  // node mode: the newest generation followed was a live recovery
  int coordinator_restarts_ = 0;  // RestartCoordinator's
  int64_t generation_ = 0;  // node mode: the coordinator's generation when this node's workers started
  std::string coordinator_instance_;  // node mode: its instance_id then (a new one: it was replaced)
  bool stopping_ = false;  // a stop was asked for (or a service is gone): no more restarts
  bool left_ = false;      // elastic: this node left the job on SIGTERM (exit 143)
  bool coordinator_reported_ = false;
  bool relay_reported_ = false;
  int64_t round_ = 0;  // supervision rounds: orders worker failures
  // Node mode: the coordinator's status in the background (from JoinJob on).
  std::unique_ptr<StatusPoller> poller_;
  // This generation's.
  std::optional<Clock::time_point> kill_at_;  // when to SIGTERM the workers still running
  bool failure_handled_ = false;
  bool verdict_reached_ = false;  // node mode: the coordinator said whether a generation follows
};

}  // namespace psync::launch
