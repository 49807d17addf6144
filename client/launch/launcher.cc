#include "client/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/launch/restart_policy.h"
#include "client/launch/signal_pipe.h"
#include "psync/common/status_macros.h"

namespace psync::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How waiting for a child's port file ended.
enum class PortWait { kListening, kExited, kInterrupted, kTimedOut };

// Waits up to 30 s for `child` (the coordinator or the relay) to write a
// positive port number into `port_file` (*port), watching for its exit and
// for a stop signal meanwhile.
PortWait WaitForPortFile(const std::string& port_file, Child& child, int* port) {
  const std::vector<Child*> only = {&child};
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (true) {
    std::ifstream f(port_file);
    if (f >> *port && *port > 0) return PortWait::kListening;
    *port = 0;
    Reap(only);
    if (TakeSignal()) return PortWait::kInterrupted;
    if (!child.running) return PortWait::kExited;
    if (Clock::now() >= deadline) return PortWait::kTimedOut;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

int ExitCodeFor(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kCancelled:
      return 130;
    case absl::StatusCode::kInvalidArgument:
      return 2;
    case absl::StatusCode::kUnavailable:
      return 3;
    default:
      return 1;
  }
}

absl::Status ForkError() { return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno))); }

// How often a node asks the coordinator about its job: while its workers
// run (a new generation opened elsewhere), and while it waits for a verdict.
constexpr milliseconds kWatchEvery(2000);
constexpr milliseconds kVerdictEvery(200);

// "ranks 2..3 of 4", "rank 1 of 2".
std::string RanksText(const LaunchOptions& o) {
  const int first = o.FirstRank(), last = first + o.nproc - 1;
  return first == last ? absl::StrCat("rank ", first, " of ", o.WorldSize())
                       : absl::StrCat("ranks ", first, "..", last, " of ", o.WorldSize());
}

}  // namespace

Launcher::Launcher(LaunchOptions opt) : opt_(std::move(opt)) {}

Launcher::~Launcher() {
  if (devnull_ >= 0) close(devnull_);
}

int Launcher::Run() {
  absl::Status st = Prepare();
  if (st.ok() && opt_.StartsCoordinator()) st = StartCoordinator();
  if (st.ok() && opt_.NodeMode()) st = JoinJob();
  if (st.ok() && opt_.UseRelay()) st = StartRelay();
  if (!st.ok()) {
    std::cerr << "psync-launch: " << st.message() << "\n";
    poller_.reset();  // its probe writes into dir_
    StopServices(milliseconds(3000));
    dir_.Remove();
    return ExitCodeFor(st);
  }
  SpawnRanks();
  while (Supervise() == GenerationEnd::kRestart) {
    // A signal that came while the workers were being stopped ends the job here.
    if (std::optional<int> sig = TakeSignal()) {
      std::cerr << "psync-launch: " << strsignal(*sig) << ": not restarting\n";
      break;
    }
    SpawnRanks();
  }
  KeepCoordinatorUntilJobEnds();
  poller_.reset();
  StopServices(milliseconds(5000));
  dir_.Remove();
  return Finish();
}

absl::Status Launcher::Prepare() {
  PSYNC_RETURN_IF_ERROR(InstallSignalPipe());
  PSYNC_RETURN_IF_ERROR(dir_.Create());
  if (opt_.token.empty()) {
    // Why: so nobody else on the machine (or on the network with
    // --host=0.0.0.0) can stop the job or touch its rendezvous keys.
    PSYNC_ASSIGN_OR_RETURN(opt_.token, dir_.MakeToken());
    generated_token_ = true;
  }
  devnull_ = open("/dev/null", O_WRONLY | O_CLOEXEC);
  return absl::OkStatus();
}

absl::StatusOr<int> Launcher::SpawnCoordinator(int port) {
  LaunchOptions o = opt_;
  o.port = port;
  std::remove(dir_.port_file().c_str());  // a restart waits for its own
  const Command c = CoordinatorCommand(o, dir_.port_file(), dir_.state_dir());
  coordinator_ = Child{"coordinator", -1, false};
  coordinator_.pid = Spawn(c.argv, c.env, devnull_);
  if (coordinator_.pid < 0) return ForkError();
  coordinator_.running = true;
  int listening = 0;
  switch (WaitForPortFile(dir_.port_file(), coordinator_, &listening)) {
    case PortWait::kListening:
      return listening;
    case PortWait::kExited:
      return absl::UnavailableError(
          absl::StrCat("psync-coordinator exited before listening (", DescribeStatus(coordinator_.status), ")"));
    case PortWait::kInterrupted:
      return absl::CancelledError("interrupted while starting the coordinator");
    case PortWait::kTimedOut:
      break;
  }
  return absl::UnavailableError("psync-coordinator did not write its port file within 30s");
}

absl::Status Launcher::StartCoordinator() {
  PSYNC_ASSIGN_OR_RETURN(const int port, SpawnCoordinator(opt_.port));
  address_.port = port;
  address_.coordinator =
      opt_.NodeMode() ? opt_.coordinator : absl::StrCat(opt_.host == "0.0.0.0" ? "127.0.0.1" : opt_.host, ":", port);
  std::cerr << "psync-launch: coordinator " << address_.coordinator << " (pid " << coordinator_.pid
            << (generated_token_ ? absl::StrCat("; token in ", dir_.token_file()) : std::string()) << "), "
            << (opt_.NodeMode() ? absl::StrCat("for the ", opt_.WorldSize(), " ranks of ", opt_.nnodes, " node(s)")
                                : absl::StrCat("starting ", opt_.nproc, " worker(s)"))
            << "\n";
  return absl::OkStatus();
}

// Node mode: the other nodes (and the coordinator) may come up in any
// order, so this node waits up to --join-timeout for the coordinator to
// answer, and adopts its restart count: a node that comes (back) after a
// restart starts its ranks as that generation's.
absl::Status Launcher::JoinJob() {
  address_.coordinator = opt_.coordinator;
  address_.port = opt_.port;
  poller_ = std::make_unique<StatusPoller>(StatusCommand(opt_, address_.coordinator), dir_.status_file(),
                                           dir_.status_err_file());
  PSYNC_ASSIGN_OR_RETURN(const CoordinatorView view, WaitForCoordinator());
  if (view.Over()) {
    return absl::UnavailableError(absl::StrCat("the job at ", address_.coordinator, " is over (", view.state,
                                               view.reason.empty() ? "" : ": ", view.reason,
                                               "); start a new coordinator"));
  }
  if (view.MaxWorld() != opt_.WorldSize()) {
    return absl::InvalidArgumentError(absl::StrCat("the job at ", address_.coordinator, " has world size ",
                                                   view.MaxWorld(), ", but --nnodes=", opt_.nnodes, " x --nproc=",
                                                   opt_.nproc, " makes ", opt_.WorldSize()));
  }
  if (!opt_.StartsCoordinator() && view.max_restarts != opt_.max_restarts) {
    std::cerr << "psync-launch: warning: --max-restarts=" << opt_.max_restarts << " but the coordinator allows "
              << view.max_restarts << " restart(s) for the job; restarts follow the coordinator\n";
  }
  CoordinatorView joined = view;
  if (view.RunsShrunk()) {
    PSYNC_ASSIGN_OR_RETURN(joined, RegroupIn(view));
    if (joined.Over()) {
      return absl::UnavailableError(absl::StrCat("the job at ", address_.coordinator, " ended (", joined.state,
                                                 ") while this node waited to join it"));
    }
  }
  restarts_done_ = joined.restarts;
  generation_ = joined.generation;
  coordinator_instance_ = joined.instance_id;
  std::cerr << "psync-launch: node " << opt_.node_rank << " of " << opt_.nnodes << ", " << RanksText(opt_) << ": job "
            << joined.job_id << " at " << address_.coordinator << " (generation " << joined.generation
            << ", restarts " << joined.restarts << "/" << joined.max_restarts << "), starting " << opt_.nproc
            << " worker(s)\n";
  return absl::OkStatus();
}

// Elastic: the job runs a generation without some nodes, this one among
// them. A regroup stops it after one iteration on every rank, each with its
// checkpoint, and opens the next generation, which this node's ranks join
// with the others, resuming from that checkpoint. Waits up to --join-timeout
// for it to open.
absl::StatusOr<CoordinatorView> Launcher::RegroupIn(const CoordinatorView& running) {
  std::cerr << "psync-launch: node " << opt_.node_rank << ": job " << running.job_id << " runs generation "
            << running.generation << " with " << running.world_size << " of " << running.MaxWorld()
            << " ranks; asking it to regroup with this node\n";
  const std::string why = absl::StrCat("node ", opt_.node_rank, " (", RanksText(opt_), ") is back");
  const Command c = RegroupCommand(opt_, address_.coordinator, why);
  if (const int rc = RunBounded(c.argv, c.env, milliseconds(10000)); rc != 0) {
    // Its ranks' Joins then wait for the next generation (they also ask for it).
    std::cerr << "psync-launch: psyncctl regroup failed (" << rc << "); starting the workers anyway\n";
    return running;
  }
  const auto deadline = Clock::now() + opt_.join_timeout;
  while (Clock::now() < deadline) {
    if (std::optional<absl::StatusOr<CoordinatorView>> a = poller_->Tick(kVerdictEvery)) {
      if (a->ok() && ((*a)->generation > running.generation || (*a)->Over())) return **a;
    }
    if (TakeSignal()) return absl::CancelledError("interrupted while waiting for the job to regroup");
    WaitForSignal(milliseconds(50));
  }
  return absl::UnavailableError(absl::StrCat("the job at ", address_.coordinator,
                                             " did not open its next generation within --join-timeout"));
}

absl::StatusOr<CoordinatorView> Launcher::WaitForCoordinator() {
  const auto deadline = Clock::now() + opt_.join_timeout;
  bool said = false;
  std::string last_error = "no answer yet";
  while (true) {
    if (std::optional<absl::StatusOr<CoordinatorView>> a = poller_->Tick(milliseconds(500))) {
      if (a->ok()) return **a;
      if (a->status().code() != absl::StatusCode::kUnavailable) {
        return absl::UnavailableError(absl::StrCat("the coordinator at ", address_.coordinator, " refused node ",
                                                   opt_.node_rank, ": ", a->status().message(),
                                                   " (check PSYNC_TOKEN / --token-file and --tls-ca)"));
      }
      last_error = std::string(a->status().message());
      if (!said) {
        said = true;
        std::cerr << "psync-launch: node " << opt_.node_rank << " of " << opt_.nnodes
                  << ": waiting for the coordinator at " << address_.coordinator << " (up to "
                  << opt_.join_timeout.count() / 1000 << "s)\n";
      }
    }
    if (TakeSignal()) return absl::CancelledError("interrupted while waiting for the coordinator");
    if (coordinator_.pid > 0 && (Reap({&coordinator_}), !coordinator_.running)) {
      return absl::UnavailableError(
          absl::StrCat("psync-coordinator exited (", DescribeStatus(coordinator_.status), ")"));
    }
    if (Clock::now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("the coordinator at ", address_.coordinator,
                                                 " did not answer within ", opt_.join_timeout.count() / 1000,
                                                 "s (--join-timeout): ", last_error));
    }
    WaitForSignal(milliseconds(50));
  }
}

// The host's plan relay (client/relay/README.md): the workers' Train streams
// go through it, one host stream to the coordinator.
absl::Status Launcher::StartRelay() {
  const Command c = RelayCommand(opt_, address_.coordinator, dir_.relay_port_file());
  relay_.pid = Spawn(c.argv, c.env, devnull_);
  relay_.running = relay_.pid > 0;
  int port = 0;
  const PortWait w = relay_.running ? WaitForPortFile(dir_.relay_port_file(), relay_, &port) : PortWait::kExited;
  if (w == PortWait::kInterrupted) return absl::CancelledError("interrupted while starting psync-relay");
  if (w != PortWait::kListening) {
    // Why not go on without it: the job was asked to run with the relay;
    // starting differently would hide a broken install.
    const std::string why = w == PortWait::kTimedOut ? "no port file within 30s"
                            : relay_.pid < 0          ? absl::StrCat("fork: ", std::strerror(errno))
                                                      : DescribeStatus(relay_.status);
    return absl::UnavailableError(
        absl::StrCat("psync-relay did not start (", why, "); use --relay=false to run without it"));
  }
  address_.relay = absl::StrCat("127.0.0.1:", port);
  std::cerr << "psync-launch: plan relay " << address_.relay << " (pid " << relay_.pid
            << "): one Train stream for the " << opt_.nproc << " local ranks\n";
  return absl::OkStatus();
}

void Launcher::SpawnRanks() {
  bool added_resume = false;
  // Node mode: a generation after the first resumes, also one that a regroup
  // (not a restart) opened (generations = 1 + restarts + regroups).
  const int earlier = opt_.NodeMode() ? static_cast<int>(generation_ - 1) : restarts_done_;
  const std::vector<std::string> flags = WorkerFlagsFor(opt_.worker_flags, earlier, &added_resume);
  if (added_resume) std::cerr << "psync-launch: workers resume from the newest checkpoint (--resume)\n";
  workers_.assign(static_cast<size_t>(opt_.nproc), Child{});
  // Every rank of this node (of this host alone without --nnodes).
  for (int r = 0; r < opt_.nproc; ++r) SpawnRank(r, flags);
  kill_at_.reset();
  failure_handled_ = false;
  verdict_reached_ = false;
}

void Launcher::SpawnRank(int local, const std::vector<std::string>& flags) {
  const RankSlot slot = NodeSlot(opt_, local);
  const Command c = WorkerCommand(opt_, address_, flags, slot, restarts_done_);
  Child& w = workers_[static_cast<size_t>(local)];
  w = Child{};
  w.what = absl::StrCat("rank ", slot.rank);
  w.pid = Spawn(c.argv, c.env, (local == 0 || opt_.all_output) ? -1 : devnull_);
  w.running = w.pid > 0;
  if (w.pid < 0) {
    std::perror("psync-launch: fork");
    w.exit_code = 1;
  }
}

bool Launcher::ReplaceFailedWorkers() {
  if (failure_handled_) return false;
  // The ended workers not replaced yet, the one that started it first.
  std::vector<WorkerEnd> ended;
  for (const WorkerEnd& e : WorkerEnds()) {
    if (e.exit_code != 0) ended.push_back(e);
  }
  while (std::optional<WorkerEnd> failed = FirstFailure(ended)) {
    ended.erase(std::find_if(ended.begin(), ended.end(), [&](const WorkerEnd& e) { return e.rank == failed->rank; }));
    const int local = failed->rank - opt_.FirstRank();
    const Child& dead = workers_[static_cast<size_t>(local)];
    const std::string how = dead.pid > 0 ? DescribeStatus(dead.status) : "not started";
    if (IsConsequence(failed->exit_code) && replacing_) {
      // Why free: it left because the coordinator ended its generation (a
      // --zero worker cannot keep its state); the loss that caused it was
      // counted when its process was replaced.
      std::cerr << "psync-launch: rank " << failed->rank << " ended (" << how
                << "); starting it again for the next generation\n";
      SpawnRank(local, WorkerFlagsFor(opt_.worker_flags, std::max(1, restarts_done_)));
      continue;
    }
    const RestartDecision d = Decide(*failed, restarts_done_, opt_.max_restarts, stopping_ || interrupts_ > 0);
    if (d != RestartDecision::kRestart) {
      replacing_ = false;
      return false;  // HandleFailure's own reporting and grace period
    }
    ++restarts_done_;
    replacing_ = true;
    std::cerr << "psync-launch: rank " << failed->rank << " died (" << how << "); restart " << restarts_done_ << " of "
              << opt_.max_restarts << " (live recovery): starting a replacement, the other workers keep training\n";
    SpawnRank(local, WorkerFlagsFor(opt_.worker_flags, restarts_done_));
  }
  return true;
}

std::vector<Child*> Launcher::Workers() {
  std::vector<Child*> out;
  for (Child& w : workers_) out.push_back(&w);
  return out;
}

std::vector<WorkerEnd> Launcher::WorkerEnds() const {
  std::vector<WorkerEnd> ends;
  for (int r = 0; r < opt_.nproc; ++r) {
    const Child& w = workers_[static_cast<size_t>(r)];
    if (!w.running) ends.push_back({opt_.FirstRank() + r, w.exit_code < 0 ? 1 : w.exit_code, w.reaped_at});
  }
  return ends;
}

Launcher::GenerationEnd Launcher::Supervise() {
  const std::vector<Child*> workers = Workers();
  while (true) {
    ++round_;
    Reap(workers, round_);
    if (coordinator_.pid > 0) Reap({&coordinator_}, round_);
    if (relay_.pid > 0) Reap({&relay_}, round_);
    const bool any_running = std::any_of(workers.begin(), workers.end(), [](Child* c) { return c->running; });
    if (coordinator_.pid > 0) WatchService(coordinator_, "psync-coordinator", &coordinator_reported_, any_running);
    // Why like the coordinator: without the relay no worker can reach the
    // coordinator's Train service, so nothing can be restarted either.
    if (relay_.pid > 0) WatchService(relay_, "psync-relay", &relay_reported_, any_running);
    if (opt_.NodeMode() ? FollowJob(any_running) : HandleFailure()) return GenerationEnd::kRestart;
    if (!any_running && Settled()) return GenerationEnd::kEnded;
    HandleSignals();
    if (kill_at_ && Clock::now() >= *kill_at_) {
      if (any_running) {
        std::cerr << "psync-launch: workers still running after the grace period; terminating them\n";
        StopAll(workers, milliseconds(5000));
      } else {
        std::cerr << "psync-launch: no verdict from the coordinator within the grace period; not restarting\n";
      }
      return GenerationEnd::kEnded;
    }
    WaitForSignal(milliseconds(50));
  }
}

bool Launcher::RestartCoordinator() {
  // Why: the workers ride through its loss (--coordinator-grace) and
  // re-register with the one started again at the same address, which
  // rebuilds the job from them (coordinator failover).
  if (stopping_ || interrupts_ > 0 || coordinator_restarts_ >= kCoordinatorRestarts) return false;
  ++coordinator_restarts_;
  std::cerr << "psync-launch: psync-coordinator exited (" << DescribeStatus(coordinator_.status)
            << "); starting it again on port " << address_.port << " (coordinator failover, " << coordinator_restarts_
            << " of " << kCoordinatorRestarts << ")\n";
  absl::StatusOr<int> port = SpawnCoordinator(address_.port);
  if (!port.ok()) {
    std::cerr << "psync-launch: " << port.status().message() << "\n";
    return false;
  }
  std::cerr << "psync-launch: coordinator " << address_.coordinator << " (pid " << coordinator_.pid << ") again\n";
  return true;
}

void Launcher::WatchService(Child& service, const char* name, bool* reported, bool workers_running) {
  if (service.running || *reported) return;
  if (&service == &coordinator_ && workers_running && RestartCoordinator()) return;
  *reported = true;
  stopping_ = true;
  std::cerr << "psync-launch: " << name << " exited (" << DescribeStatus(service.status) << "); workers will stop\n";
  if (!kill_at_ && workers_running) kill_at_ = Clock::now() + opt_.grace;
}

void Launcher::RestartEndedWorkers(const char* what, bool consequences_only) {
  for (int local = 0; local < opt_.nproc; ++local) {
    const Child& w = workers_[static_cast<size_t>(local)];
    // Exit 0 is a rank done with the job; 2 would fail the same way again;
    // another failure is a new loss, which the coordinator counts first.
    if (w.running || w.exit_code == 0 || w.exit_code == 2) continue;
    if (consequences_only && !IsConsequence(w.exit_code)) continue;
    std::cerr << "psync-launch: rank " << opt_.FirstRank() + local << " " << what << " ("
              << (w.pid > 0 ? DescribeStatus(w.status) : "not started") << ")\n";
    SpawnRank(local, WorkerFlagsFor(opt_.worker_flags, std::max(1, static_cast<int>(generation_ - 1))));
  }
}

bool Launcher::HandleFailure() {
  // Live recovery: replace the failed worker alone, while restarts last.
  if (opt_.LiveRecovery() && ReplaceFailedWorkers()) return false;
  if (failure_handled_) return false;
  const std::optional<WorkerEnd> failed = FirstFailure(WorkerEnds());
  if (!failed) return false;
  failure_handled_ = true;
  const Child& dead = WorkerOfRank(failed->rank);
  const RestartDecision d = Decide(*failed, restarts_done_, opt_.max_restarts, stopping_ || interrupts_ > 0);
  if (d == RestartDecision::kRestart) {
    ++restarts_done_;
    std::cerr << "psync-launch: rank " << failed->rank << " died ("
              << (dead.pid > 0 ? DescribeStatus(dead.status) : "not started") << "); restart " << restarts_done_
              << " of " << opt_.max_restarts << ": stopping the other workers and starting all " << opt_.nproc
              << " again\n";
    // Why at once: the coordinator has aborted (or is aborting) this
    // generation, so nothing the others do from here on counts.
    StopAll(Workers(), milliseconds(5000));
    return true;
  }
  if (opt_.max_restarts > 0 && d == RestartDecision::kNoRestartsLeft) {
    std::cerr << "psync-launch: rank " << failed->rank << " failed (" << DescribeStatus(dead.status) << ") and all "
              << opt_.max_restarts << " restarts are used: the job fails\n";
  } else if (opt_.max_restarts > 0 && d == RestartDecision::kNotRetriable) {
    std::cerr << "psync-launch: rank " << failed->rank << " exited " << failed->exit_code
              << (failed->exit_code == 2 ? " (bad flags or input)" : " (the worker program could not be started)")
              << ": not restarted, it would fail the same way\n";
  }
  // A failed worker: the coordinator aborts the others; give them `grace` to exit.
  if (!kill_at_) kill_at_ = Clock::now() + opt_.grace;
  return false;
}

bool Launcher::FollowJob(bool any_running) {
  // Live recovery: a worker of this node that left the generation the
  // coordinator already reopened (a --zero survivor exits 4) joins it anew.
  if (opt_.LiveRecovery() && followed_live_) {
    RestartEndedWorkers("ended after the loss; starting it again", /*consequences_only=*/true);
  }
  if (!failure_handled_) {
    if (const std::optional<WorkerEnd> failed = FirstFailure(WorkerEnds())) {
      failure_handled_ = true;
      std::cerr << "psync-launch: rank " << failed->rank << (IsConsequence(failed->exit_code) ? " ended" : " died")
                << " (" << DescribeStatus(WorkerOfRank(failed->rank).status)
                << "); whether the job restarts is the coordinator's call\n";
      // The others get `grace` to exit, unless the verdict restarts them first.
      if (!kill_at_) kill_at_ = Clock::now() + opt_.grace;
    }
  }
  const bool awaiting = failure_handled_ || !any_running;
  std::optional<absl::StatusOr<CoordinatorView>> answer = poller_->Tick(awaiting ? kVerdictEvery : kWatchEvery);
  if (!answer || verdict_reached_) return false;
  if (!answer->ok()) {
    // Why wait (up to the grace): the coordinator may be starting again
    // (coordinator failover) while the workers ride through its loss.
    if (awaiting && !kill_at_) kill_at_ = Clock::now() + opt_.grace;
    return false;
  }
  if ((*answer)->instance_id != coordinator_instance_ && !(*answer)->instance_id.empty() &&
      (*answer)->generation == generation_ &&
      ((*answer)->state == "JOB_RUNNING" || (*answer)->state == "JOB_STOPPING")) {
    // Why follow it: the workers re-registered with a coordinator started
    // again (failover), which runs their generation on; a later loss is its.
    std::cerr << "psync-launch: a new coordinator (instance " << (*answer)->instance_id
              << ") runs generation " << generation_ << " on (coordinator failover)\n";
    coordinator_instance_ = (*answer)->instance_id;
  }
  const Judgement j = Judge(**answer, generation_, failure_handled_, coordinator_instance_);
  if (j.verdict == Verdict::kGoOn) return false;
  if (j.verdict == Verdict::kRestart && !stopping_) {
    const bool loss = (*answer)->restarts > restarts_done_;  // a regroup counts no restart
    restarts_done_ = (*answer)->restarts;
    generation_ = (*answer)->generation;
    if (opt_.LiveRecovery() && loss) {
      // Why not stop the others: they rejoin the new generation in-process
      // with their state; only this node's dead workers need a process.
      std::cerr << "psync-launch: " << j.why << " (live recovery): this node's running workers stay\n";
      RestartEndedWorkers("died; starting a replacement", /*consequences_only=*/false);
      followed_live_ = true;
      failure_handled_ = false;
      kill_at_.reset();
      return false;
    }
    followed_live_ = false;
    std::cerr << "psync-launch: " << j.why << ": stopping this node's workers and starting its " << opt_.nproc
              << " rank(s) again\n";
    // Why at once: that generation is over; nothing its workers do counts.
    StopAll(Workers(), milliseconds(5000));
    return true;
  }
  verdict_reached_ = true;
  if (failure_handled_ || j.verdict == Verdict::kRestart) {
    std::cerr << "psync-launch: " << j.why << (stopping_ ? "; this node is stopping" : "") << ": not restarting\n";
  }
  if (!kill_at_ && any_running) kill_at_ = Clock::now() + opt_.grace;
  return false;
}

void Launcher::HandleSignals() {
  while (std::optional<int> sig = TakeSignal()) {
    ++interrupts_;
    stopping_ = true;
    if (interrupts_ == 1 && *sig == SIGTERM && opt_.Elastic() && LeaveJob()) continue;
    // Why the coordinator in node mode too: it stops every node's ranks
    // after the same iteration; stopping only ours would restart the job.
    if (interrupts_ == 1 && !opt_.psyncctl_bin.empty() && (coordinator_.running || opt_.NodeMode())) {
      std::cerr << "psync-launch: " << strsignal(*sig) << ": asking the coordinator to stop the job (again to force)\n";
      const Command c = ShutdownCommand(opt_, address_.coordinator);
      const int rc = RunBounded(c.argv, c.env, milliseconds(10000));
      if (rc != 0) {
        std::cerr << "psync-launch: psyncctl shutdown failed (" << rc << "); stopping workers with SIGTERM\n";
        SignalAll(Workers(), SIGTERM);
      }
      kill_at_ = Clock::now() + opt_.grace;
    } else {
      std::cerr << "psync-launch: " << strsignal(*sig) << ": stopping workers now\n";
      SignalAll(Workers(), interrupts_ >= 3 ? SIGKILL : SIGTERM);
      kill_at_ = Clock::now() + std::chrono::seconds(5);
    }
  }
}

bool Launcher::LeaveJob() {
  // Why not the node that runs the coordinator: the others need it.
  if (opt_.psyncctl_bin.empty() || coordinator_.pid > 0) return false;
  std::cerr << "psync-launch: Terminated: node " << opt_.node_rank
            << " leaves the elastic job (every rank stops at a checkpoint; the others go on without it)\n";
  const Command c = RegroupCommand(opt_, address_.coordinator, absl::StrCat("node ", opt_.node_rank, " leaves"));
  if (const int rc = RunBounded(c.argv, c.env, milliseconds(10000)); rc != 0) {
    std::cerr << "psync-launch: psyncctl regroup failed (" << rc << ")\n";
    return false;
  }
  left_ = true;
  kill_at_ = Clock::now() + opt_.grace;
  return true;
}

// The other nodes' ranks may still be finishing (or stopping after a
// Ctrl-C), and they need the coordinator until they are done: the launcher
// that runs it keeps it while the job runs or stops, at most `grace`. Not
// while it waits for a world: that cannot complete without this node.
void Launcher::KeepCoordinatorUntilJobEnds() {
  if (!opt_.NodeMode() || !coordinator_.running || !poller_ || interrupts_ > 1) return;
  const auto deadline = Clock::now() + opt_.grace;
  bool said = false;
  while (Clock::now() < deadline) {
    if (std::optional<absl::StatusOr<CoordinatorView>> a = poller_->Tick(kVerdictEvery)) {
      if (!a->ok() || ((*a)->state != "JOB_RUNNING" && (*a)->state != "JOB_STOPPING")) return;
      if (!said) {
        said = true;
        std::cerr << "psync-launch: keeping the coordinator up until the other nodes' ranks are done (job "
                  << (*a)->state << ", at most " << opt_.grace.count() / 1000 << "s)\n";
      }
    }
    Reap({&coordinator_});
    if (!coordinator_.running || TakeSignal()) return;
    WaitForSignal(milliseconds(50));
  }
}

void Launcher::StopServices(milliseconds term_wait) {
  if (relay_.running) StopAll({&relay_}, term_wait);
  if (coordinator_.running) StopAll({&coordinator_}, term_wait);
}

int Launcher::Finish() const {
  int worst = 0;
  std::vector<std::string> parts;
  for (const Child& w : workers_) {
    worst = std::max(worst, w.exit_code < 0 ? 1 : w.exit_code);
    parts.push_back(absl::StrCat(w.what, ": ", w.pid > 0 ? DescribeStatus(w.status) : "not started"));
  }
  // Why not 0 after leaving: the node did not see the job to its end (a
  // Kubernetes Job recreates the pod, which joins again at the next regroup).
  const int code = left_ && worst == 0 ? 128 + SIGTERM : worst;
  std::cerr << "psync-launch: " << absl::StrJoin(parts, ", ")
            << (restarts_done_ > 0
                    ? absl::StrCat(" (after ", restarts_done_, " restart", restarts_done_ > 1 ? "s" : "", ")")
                    : std::string())
            << (code != worst ? "; left the job" : "") << "; exit " << code << "\n";
  return code;
}

}  // namespace psync::launch
