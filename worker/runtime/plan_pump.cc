#include "worker/runtime/plan_pump.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/used_bitmap.h"
#include "worker/runtime/exit_codes.h"

namespace psync::runtime {

namespace coord = ::psync::coordinator;

ddp::BucketPlan ToDdpPlan(const coord::BucketPlan& p) {
  ddp::BucketPlan out;
  for (const auto& b : p.buckets) {
    std::vector<size_t> bucket;
    for (int i : b) bucket.push_back(static_cast<size_t>(i));
    out.push_back(std::move(bucket));
  }
  return out;
}

IterationPlan ToIterationPlan(const coord::Plan& p, size_t num_params) {
  IterationPlan out;
  out.iteration = p.iteration;
  out.globally_unused = bitmap::Unpack(p.globally_unused, num_params);
  if (p.bucket_plan) {
    out.bucket_plan = ToDdpPlan(*p.bucket_plan);
    out.bucket_plan_id = p.bucket_plan->id;
    out.applies_from = p.bucket_plan->applies_from_iteration;
  }
  switch (p.action) {
    case coord::Action::kContinue: out.action = PlanAction::kContinue; break;
    case coord::Action::kStopAfter: out.action = PlanAction::kStopAfter; break;
    case coord::Action::kAbort: out.action = PlanAction::kAbort; break;
  }
  out.reason = p.reason;
  out.stop_after = p.stop_after_iteration;
  return out;
}

PlanPump::PlanPump(coord::CoordinatorClient* client, std::shared_ptr<PlanMailbox> mailbox,
                   std::shared_ptr<comm::ProcessGroup> group, size_t num_params)
    : client_(client), mailbox_(std::move(mailbox)), group_(std::move(group)), num_params_(num_params),
      thread_([this] { Run(); }) {}

void PlanPump::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PlanPump::Run() {
  int64_t next = 0;
  while (!stopping()) {
    absl::StatusOr<coord::Plan> plan = client_->WaitPlan(next, std::chrono::milliseconds(250));
    if (stopping()) return;
    if (plan.ok()) {
      IterationPlan ip = ToIterationPlan(*plan, num_params_);
      const bool abort = ip.action == PlanAction::kAbort;
      const std::string reason = ip.reason;
      if (abort) ip.iteration = std::max<int64_t>(ip.iteration, next);
      mailbox_->Deliver(std::move(ip));
      if (abort) {
        Fatal(kExitPeerLost, absl::StrCat("job aborted: ", reason.empty() ? "aborted by the coordinator" : reason));
        return;
      }
      ++next;
      continue;
    }
    if (plan.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
    mailbox_->Close(plan.status());
    if (plan.status().code() == absl::StatusCode::kAborted) {
      // The coordinator is up and aborted the job: a peer's fault, not its own.
      Fatal(kExitPeerLost, absl::StrCat("job aborted: ", std::string(plan.status().message())));
      return;
    }
    Fatal(kExitCoordinatorLost, absl::StrCat("coordinator lost: ", std::string(plan.status().message())));
    return;
  }
}

bool PlanPump::stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

void PlanPump::Fatal(int code, const std::string& reason) {
  fatal_.store(code);
  if (group_) group_->Abort(absl::AbortedError(reason));
  // Watchdog: the training thread normally notices within a moment and
  // exits cleanly (Stop() wakes us). Otherwise end the process.
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::seconds(7), [this] { return stop_; })) {
    std::fprintf(stderr, "psync-worker: %s (training thread did not stop; exiting)\n", reason.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    _exit(code);
  }
}

}  // namespace psync::runtime
