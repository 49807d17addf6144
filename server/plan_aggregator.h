// PlanAggregator: per-iteration aggregation of the ranks' reports into
// plans. Part of JobState (job_state.h), which owns the lock: not
// thread-safe by itself. No gRPC.
//
// Window: with plan lookahead K, a rank may report iterations up to K ahead
// of the last plan it has (coordinator.proto, "Plan lookahead"), so reports
// for iterations p .. p+K-1 are accepted, where p is the first iteration
// whose plan is not sent yet; each rank reports consecutive iterations.
// When all W reports of p are in, Emit() makes Plan{p}:
//   - globally_unused = the parameters no rank used in p;
//   - the bucket plan from rank 0's ready order, if it came with report p,
//     applying from iteration p+K (every rank holds Plan{p} before it starts
//     step p+K);
//   - STOP_AFTER once a stop is scheduled: ScheduleStop() picks p+K-1 (no
//     rank can have started p+K without Plan{p}), announced from Plan{p} on.
// The first iteration is fixed by Start() (JobState: the generation's agreed
// JoinRequest.start_iteration, when the world completes), or else by the
// first report. One PlanAggregator serves one generation; a new generation
// gets a new one (it is movable for that).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "psync/common/bucket_packer.h"
#include "psync/v1/coordinator.pb.h"

namespace psync::server {

class PlanAggregator {
 public:
  PlanAggregator(int world_size, int lookahead);

  // The model, from the first Join: P parameters of these sizes, bucket caps.
  void SetModel(const std::vector<int64_t>& param_bytes, int64_t first_cap, int64_t cap);

  // The job's bucket plan from an earlier generation (id 1: rank 0's ready
  // order; anything else is ignored). Why: the layout decides how a bucket
  // is cut into the transport's chunks and so the order each gradient
  // element is summed in; a generation that picks up a job where another
  // left it (live recovery, a restart from a checkpoint, an elastic
  // regroup) must keep it, or its sums differ in the last bit and a long
  // run drifts from the uninterrupted one. Start() makes it the initial plan
  // once the generation starts at or after iteration 2 (one that starts at
  // 0 or 1 rebuilds it itself from rank 0's order, as the first did; one
  // that starts at 2 .. applies_from-1 takes it that much early).
  void CarryBucketPlan(const v1::BucketPlan& plan);
  const v1::BucketPlan& carried_bucket_plan() const { return carried_bucket_plan_; }
  // The job's layout to carry on: the one this generation announced (id 1),
  // else the one it carried.
  const v1::BucketPlan& job_bucket_plan() const {
    return current_bucket_plan_.id() == 1 ? current_bucket_plan_ : carried_bucket_plan_;
  }

  // Fixes the first iteration: the first report of every rank must be for
  // `first_iteration`. Call before any report.
  void Start(int64_t first_iteration);
  // Coordinator failover (coordinator.proto, "Resume"): Start(first) for a
  // generation rebuilt from its workers. `held` is the bucket plan they
  // apply, announced in Plan{announced_in} (-1: in their Join): announced
  // before `first`, every rank holds it, so it is the current plan; else the
  // ready order rank 0 sends again builds it again in that very plan.
  // `stop_after` >= 0: the stop they hold, kept as it is (never moved).
  void Resume(int64_t first, const v1::BucketPlan& held, int64_t announced_in, int64_t stop_after,
              const std::string& stop_reason, bool regroup);
  // A rank may have started iteration `iteration` already (a resumed one
  // holds plans up to K before it): a stop scheduled later is not before it.
  void NoStopBefore(int64_t iteration) { no_stop_before_ = std::max(no_stop_before_, iteration); }
  // A stop some rank holds (a plan announced it), kept as it is.
  void KeepStop(int64_t stop_after, const std::string& reason, bool regroup);
  // The epoch every emitted plan carries (JobConfig::epoch).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }

  // Everything wrong with `r` as rank `rank`'s next report (no state change).
  absl::Status Validate(int rank, const v1::Report& r) const;
  // Records a report that passed Validate, which arrived at `arrived`.
  void Add(int rank, const v1::Report& r, std::chrono::steady_clock::time_point arrived = {});
  // True when every rank reported next_plan().
  bool Ready() const;
  // Builds Plan{next_plan()} (Ready() must hold) and moves on to the next iteration.
  v1::Plan Emit();

  // Stops every rank after next_plan() + K - 1 (after the first iteration +
  // K - 1 if no report came yet); the reason goes into the plans. Returns the
  // stop iteration (-1 while the first iteration is unknown). A second call
  // keeps the first stop.
  // `regroup`: the stop ends only this generation (Plan.regroup); a later
  // ScheduleStop without it (a shutdown) keeps the iteration and turns the
  // stop into the job's end.
  int64_t ScheduleStop(const std::string& reason, bool regroup = false);
  bool stop_scheduled() const { return stop_after_ != kNoStop; }
  bool regroup() const { return stop_scheduled() && regroup_; }
  const std::string& stop_reason() const { return stop_reason_; }
  // The iteration every rank stops after: -1 none; K-1 past the first
  // iteration when requested before the first report.
  int64_t stop_after() const;
  // The plan of the stop iteration was emitted: no report can follow.
  bool StopPlanSent() const { return stop_after_ >= 0 && last_plan_ >= stop_after_; }

  int lookahead() const { return k_; }
  bool started() const { return started_; }
  int64_t next_plan() const { return next_plan_; }   // p
  int64_t last_plan() const { return last_plan_; }   // -1 = none yet
  // Whether `rank` reported next_plan() already (waiting for the others).
  bool ReportedPending(int rank) const;
  // When each rank's report of next_plan() arrived (Add's `arrived`), by
  // rank; once Ready(), for the plan latency (server/job_counters.h).
  const std::vector<std::chrono::steady_clock::time_point>& PendingArrivals() const {
    return SlotFor(next_plan_).arrived;
  }
  int64_t last_reported(int rank) const { return last_reported_[static_cast<size_t>(rank)]; }
  // Highest iteration any rank reported (-1 = none), and a rank that did.
  int64_t max_reported(int* rank = nullptr) const;
  const std::string& last_unused() const { return last_unused_; }
  const v1::BucketPlan& current_bucket_plan() const { return current_bucket_plan_; }
  int num_params() const { return static_cast<int>(param_bytes_.size()); }

 private:
  static constexpr int64_t kNoStop = -1;
  static constexpr int64_t kStopAtFirst = -2;
  struct Slot {
    int64_t iteration = -1;
    int reports = 0;
    std::vector<bool> reported;  // by rank
    std::vector<std::chrono::steady_clock::time_point> arrived;  // by rank
    std::string used_or;         // OR of the used bitmaps
  };
  Slot& SlotFor(int64_t iteration) { return slots_[static_cast<size_t>(iteration % window_)]; }
  const Slot& SlotFor(int64_t iteration) const { return slots_[static_cast<size_t>(iteration % window_)]; }
  void ResetSlot(int64_t iteration);

  int world_;  // not const: JobState replaces the aggregator per generation
  int k_;
  // Reports accepted for next_plan() .. next_plan() + window_ - 1: K, or 3K
  // in a resumed generation (Resume); one slot each.
  int window_;
  std::vector<size_t> param_bytes_;
  BucketCaps caps_;
  size_t bitmap_bytes_ = 0;

  bool started_ = false;
  int64_t next_plan_ = 0;
  int64_t last_plan_ = -1;
  std::vector<Slot> slots_;              // K of them, iteration i in slot i % K
  std::vector<int64_t> last_reported_;   // by rank, -1 = none
  int64_t max_reported_ = -1;
  int max_reported_rank_ = -1;
  std::string last_unused_;

  v1::BucketPlan current_bucket_plan_;   // the latest announced (0 = initial)
  v1::BucketPlan carried_bucket_plan_;   // an earlier generation's (CarryBucketPlan)
  bool have_ready_order_ = false;
  int64_t ready_order_iteration_ = -1;   // the report that carried it
  std::vector<size_t> ready_order_;      // completed to all P parameters

  int64_t stop_after_ = kNoStop;
  std::string stop_reason_;
  bool regroup_ = false;
  int64_t epoch_ = 0;
  int64_t no_stop_before_ = -1;  // NoStopBefore
};

}  // namespace psync::server
