#include "server/plan_aggregator.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/used_bitmap.h"
#include "server/bucket_planner.h"
#include "server/limits.h"

namespace psync::server {

PlanAggregator::PlanAggregator(int world_size, int lookahead)
    : world_(world_size),
      k_(std::max(1, lookahead)),
      window_(k_),
      slots_(static_cast<size_t>(window_)),
      last_reported_(static_cast<size_t>(world_size), -1) {}

void PlanAggregator::SetModel(const std::vector<int64_t>& param_bytes, int64_t first_cap, int64_t cap) {
  param_bytes_.assign(param_bytes.begin(), param_bytes.end());  // each >= 0 (ValidateJoinRequest)
  caps_ = BucketCaps{static_cast<size_t>(first_cap), static_cast<size_t>(cap)};
  bitmap_bytes_ = static_cast<size_t>(bitmap::BytesFor(static_cast<int64_t>(param_bytes.size())));
  current_bucket_plan_ = PlanBuckets(0, 0, ReverseOrder(param_bytes_.size()), param_bytes_, caps_);
}

void PlanAggregator::CarryBucketPlan(const v1::BucketPlan& plan) {
  if (plan.id() == 1) carried_bucket_plan_ = plan;
}

void PlanAggregator::Start(int64_t first_iteration) {
  // Why: every rank said in Join where it starts (a resumed generation
  // starts at its checkpoint's step), so the window opens there.
  started_ = true;
  size_t covered = 0;
  for (const v1::Bucket& b : carried_bucket_plan_.buckets()) covered += static_cast<size_t>(b.param_index_size());
  if (first_iteration >= 2 && carried_bucket_plan_.id() == 1 && covered == param_bytes_.size()) {
    current_bucket_plan_ = carried_bucket_plan_;
  }
  next_plan_ = first_iteration;
  for (int64_t j = first_iteration; j < first_iteration + window_; ++j) ResetSlot(j);
  if (stop_after_ == kStopAtFirst) stop_after_ = next_plan_ + k_ - 1;
}

void PlanAggregator::Resume(int64_t first, const v1::BucketPlan& held, int64_t announced_in, int64_t stop_after,
                            const std::string& stop_reason, bool regroup) {
  // Why 3K: the ranks hold plans up to K apart, each may have reported K
  // past its own, and the first Resume's next plan minus K opens the window.
  window_ = 3 * k_;
  slots_.assign(static_cast<size_t>(window_), Slot{});
  Start(first);
  // Only a layout of every parameter once (a Resume is input like any).
  std::vector<int64_t> layout;
  for (const v1::Bucket& b : held.buckets()) layout.insert(layout.end(), b.param_index().begin(), b.param_index().end());
  const bool whole =
      ValidateParamOrder(layout, param_bytes_.size(), OrderRule::kPermutation, "resume.bucket_plan").ok();
  if (announced_in < first && whole && (held.id() == 0 || held.id() == 1)) {
    // Why: every rank holds Plan{first-1} and so this plan; a ready order
    // sent again with an older report is dropped with it.
    current_bucket_plan_ = held;
    if (held.id() == 1) have_ready_order_ = true;
  }
  KeepStop(stop_after, stop_reason, regroup);
}

void PlanAggregator::KeepStop(int64_t stop_after, const std::string& reason, bool regroup) {
  if (stop_after < 0 || stop_after_ >= 0) return;
  // Why as it is: some rank already holds a plan announcing it.
  stop_after_ = stop_after;
  stop_reason_ = reason;
  regroup_ = regroup;
}

void PlanAggregator::ResetSlot(int64_t iteration) {
  Slot& s = SlotFor(iteration);
  s.iteration = iteration;
  s.reports = 0;
  s.reported.assign(static_cast<size_t>(world_), false);
  s.arrived.assign(static_cast<size_t>(world_), {});
  s.used_or.assign(bitmap_bytes_, '\0');
}

absl::Status PlanAggregator::Validate(int rank, const v1::Report& r) const {
  const int64_t i = r.iteration();
  const int64_t P = num_params();
  if (r.used_bitmap().size() != bitmap_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "report for iteration ", i, ": used_bitmap is ", r.used_bitmap().size(), " bytes but the model has ", P,
        " parameters, so it must be ", bitmap_bytes_, " bytes (one bit per parameter, manifest order)"));
  }
  if (i < 0) return absl::InvalidArgumentError(absl::StrCat("report iteration ", i, " is negative"));
  if (stop_after_ >= 0 && i > stop_after_) {
    return absl::FailedPreconditionError(absl::StrCat("report for iteration ", i,
                                                      " after the job stops after iteration ", stop_after_));
  }
  const int64_t last = last_reported_[static_cast<size_t>(rank)];
  if (last >= 0 && i == last) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " already reported iteration ", i));
  }
  if (last < 0 && started_ && i != next_plan_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "first report from rank ", rank, " is for iteration ", i, " but this generation starts at iteration ",
        next_plan_, " (JoinRequest.start_iteration, the same on every rank)"));
  }
  if (last >= 0 || started_) {
    const int64_t expected = last >= 0 ? last + 1 : next_plan_;
    if (i != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "report from rank ", rank, " for iteration ", i, " but its next iteration is ", expected,
          i < expected ? " (an old iteration)"
                       : " (a future one: every rank reports each iteration, in order)"));
    }
  }
  if (started_ && i >= next_plan_ + window_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "report from rank ", rank, " for iteration ", i, " is more than the plan lookahead (", k_,
        ") ahead of the last plan (iteration ", last_plan_, "): wait for the plan of iteration ", i - k_,
        " before starting iteration ", i));
  }
  if (!std::isfinite(r.last_step_ms()) || r.last_step_ms() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("last_step_ms ", r.last_step_ms(), " is not a valid time"));
  }
  if (!std::isfinite(r.tokens_per_s()) || r.tokens_per_s() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("tokens_per_s ", r.tokens_per_s(), " is not a valid rate"));
  }
  if (r.ready_order_size() > 0) {
    if (rank != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ready_order sent by rank ", rank, "; only rank 0 sends it"));
    }
    if (have_ready_order_) return absl::InvalidArgumentError("ready_order was already sent once");
    const std::vector<int64_t> order(r.ready_order().begin(), r.ready_order().end());
    absl::StatusOr<std::vector<size_t>> full = CompleteReadyOrder(order, param_bytes_.size());
    if (!full.ok()) return full.status();
  }
  return absl::OkStatus();
}

void PlanAggregator::Add(int rank, const v1::Report& r, std::chrono::steady_clock::time_point arrived) {
  const int64_t i = r.iteration();
  if (!started_) {
    // Why: the first report fixes the first iteration (ranks start together).
    started_ = true;
    next_plan_ = i;
    for (int64_t j = i; j < i + window_; ++j) ResetSlot(j);
    if (stop_after_ == kStopAtFirst) stop_after_ = next_plan_ + k_ - 1;
  }
  if (r.ready_order_size() > 0) {
    // Why: rank 0's observed ready order becomes the bucket plan announced
    // with this iteration's plan (validated already, so it completes).
    const std::vector<int64_t> order(r.ready_order().begin(), r.ready_order().end());
    ready_order_ = *CompleteReadyOrder(order, param_bytes_.size());
    have_ready_order_ = true;
    ready_order_iteration_ = i;
  }
  Slot& s = SlotFor(i);
  for (size_t b = 0; b < s.used_or.size(); ++b) s.used_or[b] |= r.used_bitmap()[b];
  s.reported[static_cast<size_t>(rank)] = true;
  s.arrived[static_cast<size_t>(rank)] = arrived;
  ++s.reports;
  last_reported_[static_cast<size_t>(rank)] = i;
  if (i > max_reported_) {
    max_reported_ = i;
    max_reported_rank_ = rank;
  }
}

bool PlanAggregator::Ready() const { return started_ && SlotFor(next_plan_).reports == world_; }

v1::Plan PlanAggregator::Emit() {
  const int64_t p = next_plan_;
  Slot& s = SlotFor(p);
  v1::Plan plan;
  plan.set_iteration(p);
  plan.set_epoch(epoch_);
  std::string unused(s.used_or.size(), '\0');
  for (size_t b = 0; b < s.used_or.size(); ++b) unused[b] = static_cast<char>(~s.used_or[b]);
  const int64_t P = num_params();
  if (P % 8 != 0 && !unused.empty()) unused.back() = static_cast<char>(unused.back() & ((1u << (P % 8)) - 1));
  plan.set_globally_unused(unused);
  if (have_ready_order_ && ready_order_iteration_ == p) {
    // Why: announced in Plan{p}, so it may apply from p+K, the first step
    // no rank starts without holding Plan{p}.
    current_bucket_plan_ = PlanBuckets(1, p + k_, ready_order_, param_bytes_, caps_);
    *plan.mutable_bucket_plan() = current_bucket_plan_;
    ready_order_.clear();
    ready_order_.shrink_to_fit();
  }
  if (stop_after_ >= 0) {
    plan.set_action(v1::STOP_AFTER);
    plan.set_stop_after_iteration(stop_after_);
    plan.set_reason(stop_reason_);
    plan.set_regroup(regroup_);
  } else {
    plan.set_action(v1::CONTINUE);
  }
  // Why: Plan{p} is out; the window moves on to p+1 .. p+K.
  last_plan_ = p;
  last_unused_ = std::move(unused);
  ++next_plan_;
  ResetSlot(p + window_);
  return plan;
}

int64_t PlanAggregator::ScheduleStop(const std::string& reason, bool regroup) {
  if (stop_after_ != kNoStop && regroup_ && !regroup) {
    // Why keep the iteration: ranks may already know it from earlier plans.
    regroup_ = false;
    stop_reason_ = reason;
  }
  if (stop_after_ == kNoStop) {
    regroup_ = regroup;
    // Why: Plan{p} is the first unsent plan, so no rank has started p+K yet
    // (it needs Plan{p} for that); p+K-1 is the first iteration after which
    // every rank can still stop, and every rank learns it from Plan{p}.
    stop_after_ = started_ ? std::max(next_plan_ + k_ - 1, no_stop_before_) : kStopAtFirst;
    stop_reason_ = reason;
  }
  return stop_after_;
}

int64_t PlanAggregator::stop_after() const {
  if (stop_after_ == kStopAtFirst) return next_plan_ + k_ - 1;
  return stop_after_;
}

bool PlanAggregator::ReportedPending(int rank) const {
  if (!started_) return false;
  const Slot& s = SlotFor(next_plan_);
  return s.reported[static_cast<size_t>(rank)];
}

int64_t PlanAggregator::max_reported(int* rank) const {
  if (rank) *rank = max_reported_rank_;
  return max_reported_;
}

}  // namespace psync::server
