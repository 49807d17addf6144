// JobState: one job's state machine, the single lock over its parts, and
// the only place that calls back out (plan sinks, Join callbacks) — always
// after releasing the lock (Outbox, outbox.h). No gRPC here (protobuf
// message types only), so it is unit-testable and fuzzable without a network.
//
// Parts (each with one job; none has a lock of its own):
//   Generation      (generation.h)       the current generation: its Rendezvous (who joined as which
//                                        rank, the reference model), PlanAggregator (reports -> plans,
//                                        the lookahead window, stop scheduling) and each rank's run and
//                                        stream; replaced whole on a restart
//   PendingJoins    (pending_joins.h)    the Joins not answered yet (waiting for the world, or queued
//                                        for the next generation) and their deadlines
//   PlanDelivery    (plan_delivery.h)    which stream's sink gets which plan, once per stream; the
//                                        test-only plan delay
//   LivenessPolicy  (liveness_policy.h)  which rank to declare lost
//   job_views       (job_views.h)        the read-only Control views and the /metrics snapshot
//   JobCounters     (job_counters.h)     what /metrics counts over all generations
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
//   are refused with the reason). A rank's end that arrives after the job
//   ended is recorded, nothing more: Done with exit code 0 is DONE; a Done
//   with another code, or an ABORTED job's stream closed without Done, is
//   LOST (Generation::Ended: that rank did not finish, e.g. it gave up on a
//   coordinator paused with SIGSTOP).
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
// Elastic world size (JobConfig::min_world_size < world_size;
// coordinator.proto "Elastic world size"): a WAITING generation whose
// --rejoin-timeout has passed (RejoinDeadline) starts with the n ranks that
// joined once min_world_size <= n and n divides the global batch
// (StartSmallerWorldLocked renumbers them 0..n-1). While such a smaller
// generation runs, a Join (queued) or Regroup schedules a regroup stop;
// when every rank is Done after it, the next generation opens without
// counting a restart:
//
//   RUNNING(g, n < W) --(Join or Regroup; every rank Done at the stop)--> WAITING(g+1)
//
// A loss while STOPPING, a loss with no restart left, or ranks that ran
// different numbers of steps still end the job (ABORTED). A Join that
// arrives while generation g runs and could restart is queued for g+1
// (answered when g+1 completes, or at its join deadline). Every call bound to
// a Train stream carries the generation it attached in (StreamRef); calls
// of an ended generation are refused (or ignored: StreamClosed), so an old
// worker can never touch the new generation's ranks.
//
// Coordinator failover (coordinator.proto; JobResume, job_resume.h): a
// coordinator that met no job becomes RUNNING(g) from its workers' Resume
// (WAITING(1) --(hello.resume of generation g)--> RUNNING(g), or STOPPING
// when they hold a stop plan); a rank whose stream broke re-attaches to
// the generation it runs; streams that broke while this coordinator did not
// run (a pause) are held for that instead of lost.
//
// Train streams (coordinator.proto "Train stream", "Host streams"): one API
// for both kinds. A rank's own stream (hello.rank) is a host stream of one
// rank whose messages need not name their rank; a host stream (hello.ranks)
// carries several ranks of one host. Attach returns a StreamRef
// (stream_ref.h) and every later call names the stream by it; each message
// must come from one of the stream's ranks (RankRuntime::stream). The
// stream's ranks share one sink (each plan is pushed to it once; it closes
// when its last rank lets go). Everything else (states, liveness, blame)
// stays per rank; a stream that ends loses its training ranks together, in
// one loss naming all.
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
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/scheduler.h"
#include "psync/v1/control.pb.h"
#include "psync/v1/coordinator.pb.h"
#include "server/elastic_world.h"
#include "server/event_log.h"
#include "server/generation.h"
#include "server/job_config.h"
#include "server/job_counters.h"
#include "server/recovery_log.h"
#include "server/outbox.h"
#include "server/pending_joins.h"
#include "server/plan_delivery.h"
#include "server/plan_sink.h"
#include "server/stream_ref.h"

namespace psync::server {

struct JobMetrics;  // job_metrics.h

// What coordinator failover keeps in JobState (JobResume's and
// JobJournal's, under its lock).
struct ResumeState {
  std::function<void(const std::string& why)> fenced_hook;  // JobResume::SetFencedHook
  std::chrono::steady_clock::time_point last_tick{}, forgive_until{};  // JobResume::Ticked
  std::vector<int> held;  // JobResume::HoldForReattach
  // The journal (job_journal.h): whether there is one, the lease check,
  // what it restored, a stop to ask again, and whether this coordinator
  // was fenced already (its hook runs once).
  bool journaled = false, fenced = false;
  std::function<int64_t()> newer_epoch;
  int restored_restarts = 0;
  int64_t restored_generation = 1;  // the generation a restored WAITING job forms
  int coordinator_restarts = 0;  // -1 = unknown (adopted a job without a journal)
  std::string pending_stop;
};

class JobState {
  friend struct JobViews;   // job_views.cc: the views' job-wide part
  friend struct JobResume;  // job_resume.h: coordinator failover's part of Attach
  friend struct JobJournal;  // job_journal.h: what --state-dir keeps

 public:
  using Clock = std::chrono::steady_clock;
  using JoinDone = PendingJoins::JoinDone;

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

  // Train streams (see above). Attach binds a stream to joined ranks of
  // generation hello.generation(), which must be the current one:
  // hello.rank, or every rank in hello.ranks (all or none). Their plans go
  // to `sink`. The caller must call StreamClosed exactly once when an
  // attached stream ends.
  //
  // The calls after it name the stream by the StreamRef that Attach
  // returned; a message's rank must be one of the stream's (InvalidArgument
  // naming it; on a rank's own stream Report.rank and Done.rank are unused,
  // Heartbeat.rank must be its rank). Calls of an ended generation get
  // FailedPrecondition naming both generations. An error is a protocol
  // violation: the caller ends the stream with it (and calls StreamClosed).
  //
  // A hello with `resume` (coordinator.proto, "Coordinator failover")
  // re-registers a rank with this coordinator: the first one rebuilds the
  // running generation when this coordinator has met no job yet, the others
  // re-attach to it; the plans go on once all have. Refused when this
  // coordinator formed a generation of its own meanwhile, or (fenced) when
  // the rank obeyed a newer coordinator.
  absl::StatusOr<StreamRef> Attach(const v1::Hello& hello, std::shared_ptr<PlanSink> sink);
  absl::Status Report(const StreamRef& stream, const v1::Report& report);
  // Host streams only: the reports in order, checked whole before any
  // counts, under one lock; the plans they complete go out once.
  absl::Status ReportBatch(const StreamRef& stream, const v1::ReportBatch& batch);
  // The rank is finished; its stream gets no more plans for it (a host
  // stream goes on for its other ranks).
  absl::Status Done(const StreamRef& stream, const v1::Done& done);
  // `now` is for tests.
  absl::Status Heartbeat(const StreamRef& stream, const v1::Heartbeat& hb, Clock::time_point now = Clock::now());
  // Host streams only: one rank's own connection to the host agent ended
  // without Done: as if that rank's own stream closed; the stream goes on
  // for its other ranks.
  absl::Status RankClosed(const StreamRef& stream, const v1::RankClosed& closed);
  // The stream ended: every rank still attached on it is released, and
  // those still training are lost together (one loss naming all of them;
  // `cause` says why), unless the job ended or the stop plan is out.
  // Ignored for a stream of an ended generation.
  void StreamClosed(const StreamRef& stream, const std::string& cause);

  // Declares at most one rank lost (liveness_policy.h). Called periodically.
  // `ticker`: `now` is the liveness ticker's real time (JobResume::Ticked: a
  // coordinator that did not run does not judge silence).
  void CheckLiveness(Clock::time_point now, bool ticker = false);

  // Schedules STOP_AFTER (plan_aggregator.h: p + K - 1).
  v1::ShutdownResponse Shutdown(const std::string& reason);
  // Elastic jobs: every rank stops after the same iteration and the next
  // generation forms with the ranks waiting to join, without those that
  // leave (see above). Refused (FailedPrecondition) when the job is not
  // elastic or not RUNNING.
  // Returns the iteration every rank stops after.
  absl::StatusOr<int64_t> Regroup(const std::string& reason);
  // Aborts the job (e.g. the coordinator is shutting down).
  void Abort(const std::string& reason);

  // Control views (job_views.h).
  void FillStatus(v1::StatusResponse* out) const;
  void FillWorkers(v1::WorkersResponse* out) const;
  void FillBuckets(v1::BucketsResponse* out) const;
  void FillUnused(v1::UnusedResponse* out) const;
  // What GET /metrics shows (job_metrics.h): a copy, O(world size).
  void FillMetrics(JobMetrics* out) const;
  v1::JobState state() const;
  int64_t generation() const;
  int restarts() const;
  // True once the job is FINISHED or ABORTED.
  bool Ended() const;

 private:
  bool Running() const { return state_ == v1::JOB_RUNNING || state_ == v1::JOB_STOPPING; }
  // The WAITING part of Join: picks a rank and waits for the world (until
  // `deadline`); returns `ticket`, or 0 when `done` is queued to run already.
  uint64_t JoinWaitingLocked(const v1::JoinRequest& req, JoinDone done, uint64_t ticket,
                             Clock::time_point deadline, Outbox* out);
  void CompleteWorldLocked(Outbox* out);
  // A pending Join's deadline passed (PendingJoins calls it on the scheduler).
  void ExpireJoin(uint64_t ticket);
  // Restartable mode.
  bool CanRestartLocked() const { return state_ == v1::JOB_RUNNING && restarts_ < cfg_.max_restarts; }
  // A Join while the job runs waits for the next generation: a restart may
  // come, or (elastic) the running world is smaller than the job's.
  bool CanQueueLocked() const { return CanRestartLocked() || (state_ == v1::JOB_RUNNING && elastic_.Shrunk(*gen_)); }
  void RestartLocked(int lost_rank, const std::string& why, Outbox* out);
  // The next generation, WAITING: `previous_end` says how this one ended
  // (Generation::previous_end), `why` why the job waits (the status reason).
  void OpenNextGenerationLocked(const std::string& previous_end, const std::string& why, Outbox* out);
  void RejoinDeadline(int64_t generation);
  // Elastic: starts the WAITING generation with the ranks that joined, if it may.
  void MaybeStartSmallerWorldLocked(Outbox* out);
  void ReplayQueuedJoinsLocked(Outbox* out);

  // Records `reports` of `stream` (all checked first), then emits the plans
  // they complete.
  absl::Status ReportsLocked(const StreamRef& stream, const std::vector<const v1::Report*>& reports,
                             const char* what, Outbox* out);
  absl::Status DoneLocked(int rank, const v1::Done& done, Outbox* out);
  // `ranks` (just detached from their stream) let go of it: their plans
  // stop, and those still training are lost together, or done when the job
  // ended or the stop plan is out.
  void DisconnectLocked(const std::vector<int>& ranks, const std::string& cause, Outbox* out);

  void EmitReadyPlansLocked(Outbox* out);
  void DeliverDuePlans();
  void AbortLocked(const std::string& reason, Outbox* out);
  // `ranks` lost at once (one rank, or the ranks of a host stream): one
  // loss naming all of them, then a restart or the job's abort.
  void MarkRanksLostLocked(const std::vector<int>& ranks, const std::string& why, Outbox* out);
  void MaybeFinishLocked(Outbox* out);

  const JobConfig cfg_;
  Scheduler* const scheduler_;
  const Clock::time_point start_time_;
  EventLog events_;

  mutable std::mutex mu_;  // guards everything below
  // Job-wide (all generations).
  v1::JobState state_ = v1::JOB_WAITING;
  std::string reason_;
  int restarts_ = 0;
  std::function<void(const std::string&)> generation_end_hook_;
  ResumeState resume_;  // coordinator failover's (job_resume.h)
  PendingJoins joins_;
  PlanDelivery delivery_;
  JobCounters counters_;  // /metrics: reports, losses, plans and plan latency over all generations
  RecoveryLog recoveries_;  // what each loss cost: time to the next world, iterations computed again
  std::unique_ptr<Generation> gen_;  // the current generation (replaced by RestartLocked)
  ElasticWorld elastic_;  // the rejoin clock and the world's note (last: its clock goes first)
};

}  // namespace psync::server
