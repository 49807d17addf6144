// Generation: one generation of the job (restartable mode starts a new one
// after a loss; otherwise the job has just one): who joined as which rank
// (Rendezvous), the reports and plans (PlanAggregator), each rank's run and
// the Train stream it is on (RankRuntime), its store prefix and its clocks.
// JobState owns the current one and replaces it whole on a restart, so
// nothing of an ended generation reaches the next.
//
// No lock, no callbacks, no plan delivery: its methods check and record
// under JobState's lock and report what they found; JobState acts on it
// (a loss, an abort, plans to send).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/v1/control.pb.h"
#include "psync/v1/coordinator.pb.h"
#include "server/job_config.h"
#include "server/liveness_policy.h"
#include "server/plan_aggregator.h"
#include "server/plan_sink.h"
#include "server/rendezvous.h"
#include "server/stream_ref.h"

namespace psync::server {

struct JobMetrics;  // job_metrics.h

// What JobState knows about a joined rank's run (the identity is in Rendezvous).
struct RankRuntime {
  v1::WorkerState state = v1::WORKER_STATE_UNSPECIFIED;
  bool attached = false;  // its stream is open and carries it (until Done, its close, or RankClosed)
  // The stream the rank attached on, for identity only (never dereferenced;
  // kept after the rank lets go of it): a stream may only speak for its ranks.
  const PlanSink* stream = nullptr;
  int64_t last_iteration = -1;  // last reported
  double last_step_ms = 0, last_loss = 0, last_tokens_per_s = 0;
  std::string exit_reason;
  std::chrono::steady_clock::time_point last_activity{};  // last report (or attach)
  std::chrono::steady_clock::time_point last_heard{};     // last message of any kind on the Train stream
  int64_t heartbeat_iteration = -1;
  int64_t last_report_unix_ms = 0;
  // Coordinator failover on a coordinator that ran all along (Reattach):
  // the rank may attach again, and its reports up to this iteration, sent
  // again, are dropped.
  bool reattaching = false;
  int64_t resent_through = -1;
};

class Generation {
 public:
  using Clock = std::chrono::steady_clock;

  // Generation `number` of the job `cfg` (which must outlive this).
  // `previous_end`: why generation number-1 ended ("generation 1: rank 0
  // (h:1) lost: ..."); empty for the first. `world_size`: its ranks (0 =
  // cfg.world_size; less in an elastic job, see OfJoined).
  Generation(const JobConfig& cfg, int64_t number, std::string previous_end = "", int world_size = 0);

  // Elastic worlds: this (waiting) generation's joined ranks as a generation
  // of their own, renumbered 0..n-1 in rank order (Rendezvous::Compacted);
  // `old_ranks[i]` is the rank new rank i had here.
  std::unique_ptr<Generation> OfJoined(std::vector<int>* old_ranks) const;

  // Coordinator failover (coordinator.proto, "Resume"): the running
  // generation rebuilt from the first rank's Resume in `hello` (its number,
  // world size and start) by a coordinator that just started; plans resume
  // at max(start, next_plan - K). The other ranks re-attach one by one
  // (AddResumed); one that does not within the heartbeat timeout of `now`
  // is lost (LostRank). FailedPrecondition when the Resume does not fit this
  // coordinator's job (world size, lookahead), naming the value.
  static absl::StatusOr<std::unique_ptr<Generation>> Resumed(const JobConfig& cfg, const v1::Hello& hello,
                                                             Clock::time_point now);
  bool resumed() const { return resumed_; }
  // Records rank hello.rank's Resume: its Join as a member (checked as a
  // Join is) and the stop it holds; FailedPrecondition naming the rank and
  // the value when it does not fit the first Resume.
  absl::Status AddResumed(const v1::Hello& hello);
  // A rank of this (running) generation re-registers after its stream
  // broke (coordinator.proto "Resume"; e.g. this coordinator was paused):
  // it may attach again, taking over from its old stream if that is still
  // open. FailedPrecondition when it is not training, or when it lacks plans
  // older than those remembered (RecentPlansFrom cannot fill the gap).
  absl::Status Reattach(const v1::Hello& hello);
  // The last 3K+1 plans emitted (Remember), from `iteration` on: what a
  // rank that re-attached missed.
  void Remember(PlanPtr plan);
  std::vector<PlanPtr> RecentPlansFrom(int64_t iteration) const;
  // This coordinator did not run for a while (a pause): nobody's silence
  // in it counts, the clocks of every training rank start at `now`.
  void Forgive(Clock::time_point now);
  // Resumed: how many ranks re-attached so far.
  int resumed_ranks() const { return rendezvous_.joined(); }

  int64_t number() const { return number_; }
  const std::string& previous_end() const { return previous_end_; }
  const std::string& store_prefix() const { return store_prefix_; }
  const Rendezvous& rendezvous() const { return rendezvous_; }
  Rendezvous& rendezvous() { return rendezvous_; }
  const PlanAggregator& plans() const { return plans_; }
  PlanAggregator& plans() { return plans_; }
  const RankRuntime& rank(int r) const { return ranks_[static_cast<size_t>(r)]; }
  RankRuntime& rank(int r) { return ranks_[static_cast<size_t>(r)]; }
  // The furthest iteration any rank reported (-1 = none): what a loss now
  // may make the next generation compute again (RecoveryLog).
  int64_t FurthestReported() const;
  int world_size() const { return static_cast<int>(ranks_.size()); }
  std::string RankName(int r) const { return rendezvous_.RankName(r); }
  // "rank 0 (h:1), rank 1 (h:2)"
  std::string RankNames(const std::vector<int>& ranks) const;

  // The answers to Joins that waited too long (--join-timeout): for this
  // generation's world (before RemoveMember of the expired rank), and for
  // the next one while this one runs. FailQueued's refusal once no next
  // generation can form.
  absl::Status WorldIncomplete() const;
  absl::Status QueuedJoinExpired() const;
  absl::Status WorldFull() const;
  // What the ranks waiting in this generation are told when a Join that
  // differs from them was refused with `refusal` (the world cannot form).
  absl::Status WorldCannotForm(const absl::Status& refusal) const;
  // The event log's "world complete" line (after Start).
  std::string StartText() const;
  // Why a Join for generation `asked` is refused; `joinable` is the one it
  // could join, `restarts` the restarts used so far.
  std::string JoinRefusal(int64_t asked, int64_t joinable, int restarts) const;
  // Whether a Train stream's hello of generation `asked` (for `rank`) may
  // attach: this generation's; an ended one is refused (EndedGeneration),
  // any other too (Join again).
  absl::Status CheckStreamGeneration(int rank, int64_t asked) const;
  // Refuses a call on a stream of generation `generation` (an ended one), naming `rank`.
  absl::Status EndedGeneration(int rank, int64_t generation) const;

  // Rendezvous: picks and records a Join's rank (the first Join also fixes
  // the model), or says why it is refused.
  absl::StatusOr<int> AddMember(const v1::JoinRequest& req);
  // A Join that expired or was cancelled before the world completed.
  void RemoveMember(int rank);
  // Every rank joined: the resume agreement picks the start iteration
  // (Rendezvous::Agree) and training starts there. Returns the Join
  // response every rank shares.
  std::shared_ptr<const SharedJoinResponse> Start(Clock::time_point now);
  // Why Start chose its iteration (the resume agreement; "" without it).
  const std::string& start_note() const { return start_note_; }

  // Train streams: whether `ranks` (a stream's hello, `host` = hello.ranks)
  // can attach: each joined, on no stream yet, all on one host.
  absl::Status CheckAttachable(const std::vector<int>& ranks, bool host) const;
  void Attach(const std::vector<int>& ranks, const PlanSink* stream, Clock::time_point now);
  // The rank a message on `stream` is from (`named`: the message's rank
  // field, unused on a rank's own stream), checked: in range, of this
  // generation, on this stream. `what` names the message in errors.
  absl::StatusOr<int> Sender(const StreamRef& stream, int named, const char* what) const;
  // The ranks still attached on `stream` (only `only`, when >= 0), now detached.
  std::vector<int> Detach(const StreamRef& stream, int only = -1);

  // Records a report of training rank `rank` (FailedPrecondition if it is not
  // training, else PlanAggregator::Validate's verdict).
  absl::Status Report(int rank, const v1::Report& r, Clock::time_point now);
  // Records a clean Done: the rank is DONE.
  void Done(int rank, const std::string& reason);
  // Records ranks that ended without a clean Done when that changes nothing
  // else: DONE (`done`: their stream closed with nothing left to do, after
  // the stop plan or once the job finished) or LOST (they did not finish:
  // a Done with an exit code != 0 or a stream closed without Done, after
  // the job was aborted), with `reason`.
  void Ended(const std::vector<int>& ranks, bool done, const std::string& reason);
  // "ranks ran different numbers of steps": why `rank`'s last report (after
  // Report) or its finish (after Done) cannot match the others; "" if it can.
  std::string StepsMismatchAfterReport(int rank) const;
  std::string StepsMismatchAfterDone(int rank) const;
  // A heartbeat from `rank` at `now` (counts only while it trains).
  void Heard(int rank, int64_t iteration, Clock::time_point now);
  // The rank to declare lost now, if any (liveness_policy.h).
  std::optional<LostVerdict> LostRank(Clock::time_point now) const;
  // Elastic jobs: --rejoin-timeout has passed for this generation (it may
  // start with fewer ranks).
  bool rejoin_passed() const { return rejoin_passed_; }
  void set_rejoin_passed() { rejoin_passed_ = true; }
  // A plan was emitted (liveness counts from it).
  void PlanEmitted(Clock::time_point now) { last_plan_time_ = now; }

  // The Control views of this generation (job_views.cc); JobState adds the
  // job-wide part of the status.
  void FillStatus(v1::StatusResponse* out) const;
  void FillWorkers(v1::WorkersResponse* out) const;
  void FillBuckets(v1::BucketsResponse* out) const;
  void FillUnused(v1::UnusedResponse* out) const;
  // This generation's part of /metrics (ranks, step stats); `now` for report ages.
  void FillMetrics(Clock::time_point now, JobMetrics* out) const;

 private:
  const JobConfig& cfg_;
  const int64_t number_;
  const std::string previous_end_;
  const std::string store_prefix_;
  Rendezvous rendezvous_;
  PlanAggregator plans_;
  std::vector<RankRuntime> ranks_;
  Clock::time_point world_complete_time_{};
  std::string start_note_;
  Clock::time_point last_plan_time_{};
  bool rejoin_passed_ = false;
  // Resumed (coordinator failover): the first Resume, which the others must
  // fit, and the iteration the plans resumed at (older reports sent again
  // are dropped).
  std::deque<PlanPtr> recent_plans_;  // Remember
  bool resumed_ = false;
  v1::Resume first_resume_;
  int64_t resumed_at_ = 0;
  // DONE ranks: the lowest last reported iteration among them (a report
  // beyond it means ranks ran different numbers of steps).
  int64_t min_done_iteration_ = std::numeric_limits<int64_t>::max();
  int min_done_rank_ = -1;
};

}  // namespace psync::server
