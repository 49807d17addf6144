#include "worker/ddp/zero_staging.h"

#include "absl/strings/str_cat.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "psync/tensor/ops.h"

namespace psync::ddp {

void ZeroStaging::Reset(Tensor staging) {
  staging_ = std::move(staging);
  owner_.reset();
}

absl::Status ZeroStaging::Close(Bucket& holder) {
  if (holder.work) {
    // Why Wait even when complete: the average's 1/W runs inside the first
    // successful Wait on backends that do not fuse it.
    PSYNC_RETURN_IF_ERROR(Annotate(holder.work->Wait(timeout_),
                                   absl::StrCat("DDP (--zero=2): reducing bucket ", holder.index())));
  }
  const optim::ShardPlan& plan = zero_.plan();
  const int64_t s = plan.shard(holder.index());
  PSYNC_RETURN_IF_ERROR(RunCatching(absl::StrCat("DDP (--zero=2): keeping bucket ", holder.index(), "'s shard"), [&] {
    ops::Copy(zero_.shard_storage(holder.index()), holder.buffer().View(static_cast<int64_t>(plan.rank) * s, {s}));
  }));
  for (const BucketSlot& slot : holder.slots()) {
    // The buffer is the next holder's now: nothing may write or read it through these.
    accumulators_[slot.param]->SetGradDestination(Tensor());
    if (params_[slot.param].grad().IsSameView(slot.view)) params_[slot.param].set_grad(Tensor());
  }
  owner_.reset();
  return absl::OkStatus();
}

absl::StatusOr<bool> ZeroStaging::Acquire(size_t bucket, std::vector<Bucket>& buckets,
                                          const std::vector<uint8_t>& ready, bool wait) {
  if (holds(bucket)) return true;
  if (owner_) {
    Bucket& holder = buckets[*owner_];
    // The holder is launched (it came before `bucket` in launch order).
    if (!wait && (!holder.work || !holder.work->IsCompleted())) return false;
    PSYNC_RETURN_IF_ERROR(Close(holder));
  }
  Bucket& b = buckets[bucket];
  PSYNC_RETURN_IF_ERROR(RunCatching(absl::StrCat("DDP (--zero=2): filling bucket ", bucket), [&] {
    for (BucketSlot& slot : b.slots_mutable()) {
      if (ready[slot.param]) {
        // Its gradient so far (or zeros: unused on this rank) into the slot.
        CopyGradIntoSlot(slot, params_[slot.param]);
      } else {
        accumulators_[slot.param]->SetGradDestination(slot.view);
      }
    }
  }));
  owner_ = bucket;
  return true;
}

absl::Status ZeroStaging::Release(std::vector<Bucket>& buckets) {
  if (!owner_) return absl::OkStatus();
  return Close(buckets[*owner_]);
}

}  // namespace psync::ddp
