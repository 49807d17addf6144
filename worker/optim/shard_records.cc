#include "worker/optim/shard_records.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "psync/tensor/ops.h"

namespace psync::optim {

void ShardRecords::Reset(const ShardPlan& plan, size_t buffers, const std::vector<DType>& dtypes, int distance) {
  plan_ = plan;
  buffers_ = buffers;
  distance_ = plan.world > 1 ? distance : 0;
  previous_ = Slot{};
  replicas_[0] = replicas_[1] = Slot{};
  receiving_ = -1;
  shifts_.clear();
  if (!enabled()) return;
  for (Slot* slot : {&previous_, &replicas_[0], &replicas_[1]}) {
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      const int64_t n = static_cast<int64_t>(1 + buffers) * plan.shard(b);
      slot->buckets.push_back(Tensor::Zeros({n}, dtypes[b]));
    }
  }
}

int ShardRecords::replica_of() const { return ((plan_.rank - distance_) % plan_.world + plan_.world) % plan_.world; }

void ShardRecords::KeepPrevious(size_t b, const Tensor& param_shard, const std::vector<Tensor>& buffers, int64_t step) {
  const int64_t s = plan_.shard(b);
  Tensor& record = previous_.buckets[b];
  ops::Copy(Part(record, s, 0), param_shard);
  // A bucket without parameters has no state buffers: its record stays zero.
  for (size_t k = 0; k < buffers.size(); ++k) ops::Copy(Part(record, s, k + 1), buffers[k]);
  previous_.step = step;
}

void ShardRecords::Shift(comm::ProcessGroup& group, size_t b, const Tensor& param_shard,
                         const std::vector<Tensor>& buffers, int64_t step) {
  if (receiving_ < 0 || receiving_step_ != step) {
    // The older slot takes the new step: the newer one is the step the
    // ranks may have to go back to until this one has landed everywhere.
    receiving_ = replicas_[0].step <= replicas_[1].step ? 0 : 1;
    receiving_step_ = step;
    replicas_[receiving_].step = -1;
  }
  const int64_t s = plan_.shard(b);
  Tensor& record = replicas_[receiving_].buckets[b];
  const std::string name = absl::StrCat("optimizer replica of bucket ", b);
  shifts_.push_back(group.Shift(param_shard, Part(record, s, 0), distance_, name));
  for (size_t k = 0; k < buffers_; ++k) {
    // A bucket without parameters (no buffers) sends zeros of its own.
    Tensor send = k < buffers.size() ? buffers[k] : Tensor::Zeros({s}, record.dtype());
    shifts_.push_back(group.Shift(send, Part(record, s, k + 1), distance_, name));
  }
}

absl::Status ShardRecords::WaitShifts(std::chrono::milliseconds timeout) {
  if (shifts_.empty()) return absl::OkStatus();
  absl::Status first;
  for (const auto& w : shifts_) {
    absl::Status st = w->Wait(timeout);
    if (!st.ok() && first.ok()) first = st;
  }
  shifts_.clear();
  if (first.ok() && receiving_ >= 0) replicas_[receiving_].step = receiving_step_;
  receiving_ = -1;
  return first;
}

const std::vector<Tensor>* ShardRecords::Previous(int64_t step) const {
  return enabled() && previous_.step == step && step >= 0 ? &previous_.buckets : nullptr;
}

const std::vector<Tensor>* ShardRecords::Replica(int64_t step) const {
  if (!enabled() || step < 0) return nullptr;
  for (const Slot& slot : replicas_) {
    if (slot.step == step) return &slot.buckets;
  }
  return nullptr;
}

void ShardRecords::Refill(int64_t step, const std::function<void(size_t b, Tensor& record)>& fill) {
  if (!enabled()) return;
  previous_.step = -1;
  replicas_[1].step = -1;
  for (size_t b = 0; b < replicas_[0].buckets.size(); ++b) fill(b, replicas_[0].buckets[b]);
  replicas_[0].step = step;
}

}  // namespace psync::optim
