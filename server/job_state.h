// JobState: one job's state machine, the single lock over its parts, and
// the only place that calls back out (plan sinks, Join callbacks) — always
// after releasing the lock. No gRPC here (protobuf message types only), so
// it is unit-testable and fuzzable without a network.
//
// Parts (each with one job; none has a lock of its own):
//   Rendezvous      (rendezvous.h)       who joined as which rank, the reference model, waiting Joins
//   PlanAggregator  (plan_aggregator.h)  reports -> plans, the lookahead window, stop scheduling
//   LivenessPolicy  (liveness_policy.h)  which rank to declare lost
//   job_views       (job_views.h)        the read-only Control views
//
// Job state machine (v1::JobState):
//
//   WAITING --(W ranks joined)--> RUNNING --(Shutdown)--> STOPPING
//      |                             |                       |
//      |(Shutdown)                   |(every rank Done)      |(every rank Done, or
//      v                             v                       v  disconnected after the stop plan)
//   FINISHED <-----------------------+-----------------------+
//
//   RUNNING / STOPPING --(a rank lost: stream closed without Done, silent
//   beyond the heartbeat timeout, report timeout, Done with exit_code != 0,
//   protocol violation, ranks that ran different numbers of steps)--> ABORTED
//   (every other rank gets an ABORT plan naming the lost rank; later Joins
//   are refused with the reason).
//
// Generations (restartable mode, JobConfig::max_restarts > 0): a rank lost
// while RUNNING with restarts left does not end the job. It ends generation
// g instead (ABORT plan to every other rank, EVENT_LOST + EVENT_RESTARTING
// naming the rank and g, the generation-end hook drops g's store keys) and
// the job goes back to WAITING as generation g+1 with a fresh Rendezvous,
// PlanAggregator and per-rank state:
//
//   RUNNING(g) --(rank lost, restarts < max_restarts)--> WAITING(g+1) --(W ranks)--> RUNNING(g+1)
//
// A loss while STOPPING, a loss with no restart left, or ranks that ran
// different numbers of steps still end the job (ABORTED). A Join that
// arrives while generation g runs and could restart is queued for g+1
// (answered when g+1 completes, or at its join deadline). Every call bound to
// a Train stream carries the generation it attached in; calls of an ended
// generation are refused (or ignored: StreamClosed), so an old worker can
// never touch the new generation's ranks.
//
// Host streams (coordinator.proto "Host streams"): a Train stream may carry
// several ranks of one host. Their RankRuntimes share one sink (each plan is
// pushed to it once; it closes when its last rank lets go) and remember the
// stream (RankRuntime::stream), so a host stream can only speak for its own
// ranks. Everything else (states, liveness, blame) stays per rank; a host
// stream that ends loses its training ranks together, in one loss naming all.
//
// Waiting holds no thread: a Join that arrives before the world is complete
// is answered (its callback runs) by the Join that completes the world, by
// the Scheduler at the join deadline, by CancelJoin, or by Shutdown/Abort.
// Liveness is a periodic CheckLiveness (LivenessTicker, liveness.h).
//
// Threads: every public method is thread-safe (one mutex, mu_, guards all
// state below it). Callers are the gRPC callback threads (reactors), the
// scheduler's thread (deadlines, liveness, delayed plans) and tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/v1/control.pb.h"
#include "psync/v1/coordinator.pb.h"
#include "server/event_log.h"
#include "server/plan_aggregator.h"
#include "server/plan_mailbox.h"
#include "server/rendezvous.h"
#include "common/scheduler.h"

namespace psync::server {

struct JobConfig {
  std::string job_id = "psync";
  int world_size = 1;
  std::chrono::milliseconds join_timeout{300000};
  std::chrono::milliseconds report_timeout{60000};
  // A TRAINING rank not heard from (any Train message) this long is lost.
  // 0 = min(5 s, report_timeout / 2).
  std::chrono::milliseconds heartbeat_timeout{0};
  // K, the plan lookahead announced in JoinResponse (coordinator.proto).
  int plan_lookahead = 2;
  // Test and benchmark only: hold every plan back this long before it goes
  // to the ranks (simulates a slow coordinator). 0 = off.
  std::chrono::milliseconds test_only_plan_delay{0};
  // Restartable mode: how many times a lost rank may end a generation and let
  // the world rejoin as the next one (see "Generations" above). 0 = a lost
  // rank aborts the job (the default).
  int max_restarts = 0;
};

// heartbeat_timeout with the default applied (always > 0).
std::chrono::milliseconds EffectiveHeartbeatTimeout(const JobConfig& cfg);
// The interval workers send heartbeats at: heartbeat_timeout / 4, in 10 ms .. 1 s.
std::chrono::milliseconds HeartbeatInterval(const JobConfig& cfg);

// What JobState knows about a joined rank's run (the identity is in Rendezvous).
struct RankRuntime {
  v1::WorkerState state = v1::WORKER_STATE_UNSPECIFIED;
  bool attached = false;
  std::shared_ptr<PlanSink> sink;  // released (reset) when the rank is done, lost or its stream closed
  // The stream the rank attached on, for identity only (never dereferenced;
  // kept after the sink is released): a host stream may only speak for its ranks.
  const PlanSink* stream = nullptr;
  int64_t last_iteration = -1;  // last reported
  double last_step_ms = 0, last_loss = 0;
  std::string exit_reason;
  std::chrono::steady_clock::time_point last_activity{};  // last report (or attach)
  std::chrono::steady_clock::time_point last_heard{};     // last message of any kind on the Train stream
  int64_t heartbeat_iteration = -1;
  int64_t last_report_unix_ms = 0;
};

class JobState {
 public:
  using Clock = std::chrono::steady_clock;
  using JoinDone = Rendezvous::JoinDone;

  // `scheduler` runs join deadlines and delayed plans; it must outlive this.
  // `flushes` (optional, must outlive this) starts the sinks' writes of a
  // plan broadcast; without it they run in order on the calling thread.
  JobState(JobConfig config, Scheduler* scheduler, FlushRunner* flushes = nullptr);
  JobState(const JobState&) = delete;
  JobState& operator=(const JobState&) = delete;

  // heartbeat_timeout resolved (EffectiveHeartbeatTimeout), lookahead >= 1.
  const JobConfig& config() const { return cfg_; }
  EventLog& events() { return events_; }

  // Runs (never with the lock held) when a generation ends in a restart,
  // with that generation's store prefix, so its bootstrap keys can be
  // dropped. Set before serving.
  void SetGenerationEndHook(std::function<void(const std::string& store_prefix)> hook);

  // Rendezvous. `done` runs exactly once, never with the lock held: from
  // this call (refused, or this Join completed the world), or later (the
  // world completed, join_timeout passed, CancelJoin, Shutdown, Abort).
  // Returns a ticket for CancelJoin; 0 when `done` has run already. In
  // restartable mode a Join while the current generation runs is queued for
  // the next one (see "Generations").
  uint64_t Join(const v1::JoinRequest& req, JoinDone done);
  // The client of a waiting Join went away: its rank is released.
  void CancelJoin(uint64_t ticket);

  // Binds a Train stream to a joined rank of generation hello.generation()
  // (which must be the current one); its plans go to `sink`. The caller must
  // call StreamClosed(rank, generation) exactly once when the stream ends.
  // The calls below name the stream by (rank, the generation of its hello);
  // those of an ended generation get FailedPrecondition naming both
  // generations, so the caller ends that stream.
  absl::Status Attach(const v1::Hello& hello, std::shared_ptr<PlanSink> sink);
  // One report from an attached rank. An error is a protocol violation by
  // that rank: the caller ends its stream with the status (and calls StreamClosed).
  absl::Status Report(int rank, int64_t generation, const v1::Report& report);
  // Done from an attached rank.
  absl::Status Done(int rank, int64_t generation, const v1::Done& done);
  // Heartbeat from an attached rank (`now` is for tests). An error is a
  // protocol violation (wrong rank in the message).
  absl::Status Heartbeat(int rank, int64_t generation, const v1::Heartbeat& hb, Clock::time_point now = Clock::now());
  // The rank's stream ended (after Done, or not). `cause` is used in the
  // loss message when the rank had not sent Done ("stream closed", or the
  // status). Ignored for a stream of an ended generation.
  void StreamClosed(int rank, int64_t generation, const std::string& cause);

  // Host streams (coordinator.proto "Host streams"): Attach with a non-empty
  // hello.ranks binds every listed rank to one sink (all or none). The calls
  // below name the stream by its sink (`stream`, the pointer given to Attach;
  // identity only) and the generation of its hello; a rank not attached on
  // that stream is an InvalidArgument naming it. Errors are protocol
  // violations: the caller ends the stream (and calls HostStreamClosed).
  absl::Status ReportBatch(const PlanSink* stream, int64_t generation, const v1::ReportBatch& batch);
  absl::Status HostReport(const PlanSink* stream, int64_t generation, const v1::Report& report);
  absl::Status HostDone(const PlanSink* stream, int64_t generation, const v1::Done& done);
  absl::Status HostHeartbeat(const PlanSink* stream, int64_t generation, const v1::Heartbeat& hb,
                             Clock::time_point now = Clock::now());
  // One rank's own connection to the host agent ended without Done: as
  // StreamClosed for that rank; the stream goes on for its other ranks.
  absl::Status RankClosed(const PlanSink* stream, int64_t generation, const v1::RankClosed& closed);
  // The host stream ended: every rank still attached on it is released, and
  // those still training are lost together (one loss naming all of them).
  // Call exactly once per attached host stream. Ignored for an ended generation.
  void HostStreamClosed(const PlanSink* stream, int64_t generation, const std::string& cause);

  // Declares at most one rank lost (liveness_policy.h). Called periodically.
  void CheckLiveness(Clock::time_point now);

  // Schedules STOP_AFTER (plan_aggregator.h: p + K - 1).
  v1::ShutdownResponse Shutdown(const std::string& reason);
  // Aborts the job (e.g. the coordinator is shutting down).
  void Abort(const std::string& reason);

  // Control views (job_views.h).
  void FillStatus(v1::StatusResponse* out) const;
  void FillWorkers(v1::WorkersResponse* out) const;
  void FillBuckets(v1::BucketsResponse* out) const;
  void FillUnused(v1::UnusedResponse* out) const;
  v1::JobState state() const;
  int64_t generation() const;
  int restarts() const;
  // True once the job is FINISHED or ABORTED.
  bool Ended() const;

 private:
  // Work to do once mu_ is released (callbacks into reactors, sink flushes).
  // Declared before the lock in each public method, so it runs after it.
  struct Outbox {
    std::vector<std::function<void()>> calls;
    // Sinks with new plans to send (PushLocked), flushed by `runner` (or in order).
    std::vector<std::shared_ptr<PlanSink>> flushes;
    FlushRunner* runner = nullptr;
    // Plans first, as before this split: every path that has both pushes
    // its plans before it queues calls (Abort, Restart).
    ~Outbox() {
      if (runner != nullptr && !flushes.empty()) {
        runner->FlushAll(std::move(flushes));
      } else {
        for (auto& s : flushes) s->Flush();
      }
      for (auto& f : calls) f();
    }
  };

  // A Join waiting for the next generation while the current one runs.
  struct QueuedJoin {
    v1::JoinRequest req;
    JoinDone done;
    Clock::time_point deadline;  // on the scheduler's clock
    uint64_t timer = 0;
  };

  bool Running() const { return state_ == v1::JOB_RUNNING || state_ == v1::JOB_STOPPING; }
  std::string RankName(int rank) const { return rendezvous_.RankName(rank); }
  std::shared_ptr<const SharedJoinResponse> MakeSharedJoinResponse() const;
  // The WAITING part of Join: picks a rank and waits for the world (until
  // `deadline`); returns `ticket`, or 0 when `done` is queued to run already.
  uint64_t JoinWaitingLocked(const v1::JoinRequest& req, JoinDone done, uint64_t ticket,
                             Clock::time_point deadline, Outbox* out);
  void CompleteWorldLocked(Outbox* out);
  void FailWaitersLocked(const std::string& why, Outbox* out);
  void ExpireJoin(uint64_t ticket);
  // Restartable mode.
  bool CanRestartLocked() const { return state_ == v1::JOB_RUNNING && restarts_ < cfg_.max_restarts; }
  // Why a Join for generation `asked` is refused; `joinable` is the one it could join.
  std::string GenerationRefusalLocked(int64_t asked, int64_t joinable) const;
  absl::Status CheckStreamGenerationLocked(int rank, int64_t generation) const;
  uint64_t QueueForNextGenerationLocked(const v1::JoinRequest& req, JoinDone done);
  void ExpireQueuedJoin(uint64_t ticket);
  void FailQueuedJoinsLocked(const std::string& why, Outbox* out);
  void RestartLocked(int lost_rank, const std::string& why, Outbox* out);
  void ReplayQueuedJoinsLocked(Outbox* out);
  void EmitReadyPlansLocked(Outbox* out);
  void BroadcastLocked(PlanPtr plan, Outbox* out);
  void DeliverLocked(const PlanPtr& plan, Outbox* out);
  void DeliverDuePlans();
  void PushLocked(int rank, const PlanPtr& plan, Outbox* out);
  // The rank's plans stop: it lets go of its sink, which is closed when no
  // rank is left on it.
  void CloseSinkLocked(int rank);
  absl::Status AttachHostLocked(const v1::Hello& hello, std::shared_ptr<PlanSink> sink);
  // OK when `rank` is attached on `stream` in `generation`.
  absl::Status CheckOnStreamLocked(const PlanSink* stream, int64_t generation, int rank, const char* what) const;
  // Validates and records one report; the caller emits the plans it completes.
  absl::Status ReportLocked(int rank, int64_t generation, const v1::Report& r, Outbox* out);
  absl::Status DoneLocked(int rank, const v1::Done& done, Outbox* out);
  void HeartbeatLocked(int rank, const v1::Heartbeat& hb, Clock::time_point now);
  // The stream-closed rule for `ranks` (released already): lost together, or
  // done when the job ended or the stop plan is out.
  void RanksDisconnectedLocked(const std::vector<int>& ranks, const std::string& cause, Outbox* out);
  void AbortLocked(const std::string& reason, Outbox* out);
  void MarkLostLocked(int rank, const std::string& why, Outbox* out);
  // Several ranks lost at once (a host stream): one loss naming all of them.
  void MarkRanksLostLocked(const std::vector<int>& ranks, const std::string& why, Outbox* out);
  void MaybeFinishLocked(Outbox* out);

  const JobConfig cfg_;
  Scheduler* const scheduler_;
  FlushRunner* const flush_runner_;  // may be null
  const Clock::time_point start_time_;
  EventLog events_;

  mutable std::mutex mu_;
  // Job-wide (all generations).
  v1::JobState state_ = v1::JOB_WAITING;
  std::string reason_;
  int64_t generation_ = 1;
  int restarts_ = 0;
  std::string last_restart_reason_;
  std::map<uint64_t, QueuedJoin> next_generation_joins_;  // by ticket (arrival order)
  std::function<void(const std::string&)> generation_end_hook_;
  uint64_t next_ticket_ = 1;  // Join tickets, unique across generations
  // Per generation (replaced by RestartLocked).
  std::string store_prefix_;
  Rendezvous rendezvous_;
  PlanAggregator plans_;
  std::vector<RankRuntime> ranks_;
  uint64_t broadcast_seq_ = 0;  // DeliverLocked's count (PlanSink::job_last_broadcast)
  Clock::time_point world_complete_time_{};
  Clock::time_point last_plan_time_{};
  // DONE ranks: the lowest last reported iteration among them (a report
  // beyond it means ranks ran different numbers of steps).
  int64_t min_done_iteration_ = std::numeric_limits<int64_t>::max();
  int min_done_rank_ = -1;
  // Test-only plan delay: plans waiting for their time, oldest first.
  std::deque<std::pair<Clock::time_point, PlanPtr>> delayed_;
};
}  // namespace psync::server
