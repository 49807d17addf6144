// JobState: membership state machine and per-iteration aggregation of one
// job. No gRPC here (protobuf message types only), so it is unit-testable.
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
//   protocol violation)--> ABORTED
//   (every other rank gets an ABORT plan naming the lost rank; later Joins
//   are refused with the reason).
//
// Per-iteration flow: each TRAINING rank sends Report{i} for i = first, first+1, ...
// A report for i is only accepted while i is the first iteration whose plan
// has not been sent (a rank must receive Plan{i-1} before reporting i). When
// all W reports of i arrived, Plan{i} (globally unused = not used on any
// rank; bucket plan if rank 0's ready order came with report i; action) is
// pushed to every rank's mailbox. Shutdown marks that same first unsent
// iteration STOP_AFTER, so every rank stops after the same iteration.
//
// Liveness (CheckLiveness, about every heartbeat_timeout/4): every message on
// a rank's Train stream (hello, report, heartbeat, done) refreshes its
// last_heard time; workers send a Heartbeat every heartbeat_interval()
// from a thread of their own, so a rank blocked in a collective is still
// heard. Which rank is blamed, in this order:
//   1. Silent: a TRAINING rank not heard for more than heartbeat_timeout is
//      lost ("no message for ..."); if several are, the one silent longest.
//      This does not wait for any report deadline.
//   2. Report deadline: a TRAINING rank that has not reported the pending
//      iteration within report_timeout (of the last plan or its last report)
//      is lost ("no report for iteration N within ..."), but only while no
//      TRAINING rank is quiet, i.e. unheard for more than two heartbeat
//      intervals (2 x heartbeat_timeout/4, at most 2 s). A quiet rank is
//      either about to become silent (then rule 1 blames it) or will be heard
//      again (then rule 2 applies), so the deferral is bounded by
//      heartbeat_timeout. Ties: the lowest rank past its deadline.
// Why: when one rank's link is cut without a TCP reset, its peers block in
// the collective with it and stop reporting too; they keep heartbeating,
// the cut rank does not, so the cut rank is the one blamed: by rule 1 when
// heartbeat_timeout < report_timeout (the default), else because it is quiet
// at the report deadline (it is, once report_timeout exceeds two heartbeat
// intervals plus the time between the cut and the last plan). The heartbeat timeout
// defaults to min(5 s, report_timeout / 2), so rule 1 normally fires first.
// A JOINED rank that never opens a Train stream is lost report_timeout after
// the world completed.
//
// Threads: every public method is thread-safe (one mutex, mu_). Callers are
// gRPC handler threads (Join blocks here until the world is complete), the
// liveness thread (CheckLiveness) and control handlers. Plans are delivered
// through PlanMailbox objects that each Train stream's writer thread drains.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
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
#include "server/plan_mailbox.h"

namespace psync::server {

struct JobConfig {
  std::string job_id = "psync";
  int world_size = 1;
  std::chrono::milliseconds join_timeout{300000};
  std::chrono::milliseconds report_timeout{60000};
  // A TRAINING rank not heard from (any Train message) this long is lost.
  // 0 = min(5 s, report_timeout / 2).
  std::chrono::milliseconds heartbeat_timeout{0};
};

// heartbeat_timeout with the default applied (always > 0).
std::chrono::milliseconds EffectiveHeartbeatTimeout(const JobConfig& cfg);
// The interval workers send heartbeats at: heartbeat_timeout / 4, in 10 ms .. 1 s.
std::chrono::milliseconds HeartbeatInterval(const JobConfig& cfg);

class JobState {
 public:
  using Clock = std::chrono::steady_clock;

  explicit JobState(JobConfig config);
  JobState(const JobState&) = delete;
  // config() has heartbeat_timeout resolved (EffectiveHeartbeatTimeout).
  JobState& operator=(const JobState&) = delete;

  const JobConfig& config() const { return cfg_; }
  EventLog& events() { return events_; }

  // Rendezvous. Blocks until the world is complete, the join timeout passes,
  // `cancelled()` turns true (polled every 100 ms), or the job ends. On
  // timeout / cancel the rank is released again.
  absl::StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& req,
                                        const std::function<bool()>& cancelled = nullptr);

  // Binds a Train stream to a joined rank. Returns the rank's mailbox; the
  // caller must call StreamClosed(rank) exactly once when the stream ends.
  absl::StatusOr<std::shared_ptr<PlanMailbox>> Attach(const v1::Hello& hello);
  // One report from an attached rank. An error is a protocol violation by
  // that rank: the caller ends its stream with the status (and calls StreamClosed).
  absl::Status Report(int rank, const v1::Report& report);
  // Done from an attached rank.
  absl::Status Done(int rank, const v1::Done& done);
  // Heartbeat from an attached rank (`now` is for tests). An error is a
  // protocol violation (wrong rank in the message).
  absl::Status Heartbeat(int rank, const v1::Heartbeat& hb, Clock::time_point now = Clock::now());
  // The rank's stream ended (after Done, or not). `cause` is used in the
  // loss message when the rank had not sent Done ("stream closed", or the status).
  void StreamClosed(int rank, const std::string& cause);

  // Declares at most one rank lost per call, by the rules in the header
  // comment (silent beyond heartbeat_timeout first; report deadline only
  // while no rank is quiet; no Train stream within report_timeout of the
  // world completing). Called by the liveness thread.
  void CheckLiveness(Clock::time_point now);

  // Schedules STOP_AFTER on the first iteration whose plan was not sent yet.
  v1::ShutdownResponse Shutdown(const std::string& reason);
  // Aborts the job (e.g. the coordinator is shutting down).
  void Abort(const std::string& reason);

  // Control views.
  void FillStatus(v1::StatusResponse* out) const;
  void FillWorkers(v1::WorkersResponse* out) const;
  void FillBuckets(v1::BucketsResponse* out) const;
  void FillUnused(v1::UnusedResponse* out) const;
  v1::JobState state() const;
  // True once the job is FINISHED or ABORTED.
  bool Ended() const;

 private:
  struct Member {
    bool joined = false;
    std::string hostname, device;
    int64_t pid = 0;
    v1::WorkerState state = v1::WORKER_STATE_UNSPECIFIED;
    bool attached = false;
    std::shared_ptr<PlanMailbox> mailbox;
    int64_t last_iteration = -1;
    double last_step_ms = 0, last_loss = 0;
    std::string exit_reason;
    Clock::time_point last_activity{};   // last report (or attach)
    Clock::time_point last_heard{};      // last message of any kind on the Train stream
    int64_t heartbeat_iteration = -1;
    int64_t last_report_unix_ms = 0;
  };

  std::string RankNameLocked(int rank) const;  // "rank 1 (host:pid)"
  absl::Status CheckCompatibleLocked(const v1::JoinRequest& req) const;
  void EmitPlanLocked();
  void AbortLocked(const std::string& reason);
  void MarkLostLocked(int rank, const std::string& why);
  void MaybeFinishLocked();
  void BroadcastLocked(const v1::Plan& plan);
  bool StopPlanSentLocked() const;

  const JobConfig cfg_;
  const Clock::time_point start_time_;
  const std::string store_prefix_;
  EventLog events_;

  mutable std::mutex mu_;
  std::condition_variable join_cv_;
  v1::JobState state_ = v1::JOB_WAITING;
  std::string reason_;
  const int64_t generation_ = 1;
  std::vector<Member> members_;
  int joined_ = 0;
  Clock::time_point world_complete_time_{};

  // Reference model from the first worker that joined.
  bool have_reference_ = false;
  int reference_rank_ = -1;
  std::vector<v1::ParamSpec> manifest_;
  std::vector<int64_t> param_bytes_;
  std::string backend_;
  int64_t bucket_cap_ = 0, first_bucket_cap_ = 0;
  v1::BucketPlan current_plan_;

  // Aggregation of the pending iteration (the first whose plan is unsent).
  bool started_ = false;          // first report seen (fixes the first iteration)
  int64_t next_plan_iter_ = 0;
  int reports_ = 0;
  std::vector<bool> reported_;    // by rank, for next_plan_iter_
  std::string used_or_;           // OR of used bitmaps for next_plan_iter_
  bool have_ready_order_ = false;
  bool pending_bucket_plan_ = false;
  v1::BucketPlan next_bucket_plan_;
  Clock::time_point last_plan_time_{};

  int64_t last_plan_iter_ = -1;
  std::string last_unused_;

  // Shutdown: -1 none; kStopAtFirst = before the first report; else the iteration.
  static constexpr int64_t kStopAtFirst = -2;
  int64_t stop_after_ = -1;
  std::string stop_reason_;
};

// Bit helpers (LSB-first within each byte, as in coordinator.proto).
inline bool BitmapGet(const std::string& bm, int64_t i) {
  return (static_cast<unsigned char>(bm[static_cast<size_t>(i / 8)]) >> (i % 8)) & 1u;
}

}  // namespace psync::server
