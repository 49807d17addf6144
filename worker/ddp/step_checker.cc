#include "worker/ddp/step_checker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "psync/common/exit_code.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "psync/tensor/ops.h"

namespace psync::ddp {

namespace {
std::chrono::milliseconds Left(TraceClock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - TraceClock::now()));
}
}  // namespace

void StepChecker::Reset() {
  issued_ = false;
  work_.reset();
  tensor_ = Tensor();
}

absl::Status StepChecker::Issue(int64_t sequence, uint32_t plan_id, const Tensor& bucket0_tail) {
  if (!enabled_) return absl::OkStatus();
  tag_ = StepTag{declared_.value_or(sequence), sequence, plan_id};
  absl::Status st = RunCatching("DDP: step check", [&] {
    Tensor mine = EncodeStepTag(tag_, group_.rank(), group_.size(), device_);
    if (fused_) {
      // Bucket 0 launches after this (launches wait for the first hook).
      tensor_ = bucket0_tail;
      ops::Copy(tensor_, mine);
    } else {
      tensor_ = mine;
      // Why a constant name: groups that compare collective names (shm) must
      // see the same collective on every rank; the tags do the comparing.
      work_ = group_.AllreduceSum(tensor_, "step check");
    }
  });
  if (!st.ok()) return st;
  issued_ = true;
  return absl::OkStatus();
}

absl::Status StepChecker::Verify(const std::shared_ptr<comm::Work>& bucket0_work, size_t num_buckets,
                                 TraceClock::time_point deadline) {
  if (!issued_) return absl::OkStatus();
  absl::Status st = (fused_ ? bucket0_work : work_)->Wait(Left(deadline));
  if (!st.ok()) {
    return Annotate(st, fused_ ? absl::StrCat("DDP: reducing bucket 0 of ", num_buckets, " (rank ", group_.rank(),
                                              ", iteration ", tag_.iteration, ")")
                               : absl::StrCat("DDP: step check (rank ", group_.rank(), ", iteration ", tag_.iteration,
                                              ")"));
  }
  // The default hook averaged the tags with the gradients.
  const float scale = fused_ ? 1.0f / static_cast<float>(group_.size()) : 1.0f;
  absl::StatusOr<std::vector<StepTag>> tags;
  st = RunCatching("DDP: step check", [&] { tags = DecodeStepTags(tensor_, group_.size(), scale); });
  // Not a tag at all: a rank paired this exchange with another collective (out of step).
  if (st.ok() && !tags.ok()) st = WithExitCode(absl::AbortedError(std::string(tags.status().message())), kExitPeerLost);
  if (st.ok()) st = CompareStepTags(*tags, last_agreed_, group_.rank());
  if (st.ok()) {
    last_agreed_ = tag_;
    return absl::OkStatus();
  }
  // Why a barrier before the caller aborts: every peer reaches the same
  // verdict from its own copy of the tags, but only once its exchange has
  // finished, and aborting closes the connections (Gloo) under it. A peer
  // enters this barrier only after it decoded the tags, so once the barrier
  // is through every peer has its verdict. Bounded: a peer whose collectives
  // no longer pair with ours may never come.
  (void)group_.Barrier(std::min(std::chrono::milliseconds(5000), Left(deadline)));
  return st;
}

}  // namespace psync::ddp
