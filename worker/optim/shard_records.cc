#include "worker/optim/shard_records.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "psync/tensor/ops.h"
#include "worker/comm/joined_work.h"

namespace psync::optim {

void ShardRecords::Reset(const ShardPlan& plan, size_t buffers, const std::vector<DType>& dtypes, int distance,
                         int copies) {
  plan_ = plan;
  buffers_ = buffers;
  previous_ = Slot{};
  copies_.clear();
  receiving_step_ = -1;
  shifts_.clear();
  const int world = plan.world;
  for (int c = 1; c <= copies && distance > 0 && c < world; ++c) {
    // c * distance ahead, or the next rank after it that is neither this
    // one nor another copy's (the ring is short).
    int d = static_cast<int>((static_cast<int64_t>(c) * distance) % world);
    auto taken = [&](int x) {
      if (x == 0) return true;
      for (const Copy& k : copies_) {
        if (k.distance == x) return true;
      }
      return false;
    };
    while (taken(d)) d = (d + 1) % world;
    Copy k;
    k.distance = d;
    k.of = ((plan.rank - d) % world + world) % world;
    copies_.push_back(std::move(k));
  }
  if (!enabled()) return;
  auto allocate = [&](Slot& slot) {
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      slot.buckets.push_back(Tensor::Zeros({static_cast<int64_t>(1 + buffers) * plan.shard(b)}, dtypes[b]));
    }
  };
  allocate(previous_);
  for (Copy& k : copies_) {
    allocate(k.slots[0]);
    allocate(k.slots[1]);
  }
}

int64_t ShardRecords::bytes() const {
  int64_t n = 0;
  auto add = [&](const Slot& slot) {
    for (const Tensor& t : slot.buckets) n += static_cast<int64_t>(t.nbytes());
  };
  add(previous_);
  for (const Copy& k : copies_) {
    add(k.slots[0]);
    add(k.slots[1]);
  }
  return n;
}

void ShardRecords::KeepPrevious(size_t b, const Tensor& param_shard, const std::vector<Tensor>& buffers, int64_t step) {
  Pack(previous_.buckets[b], plan_.shard(b), param_shard, buffers);
  previous_.step = step;
}

void ShardRecords::Pack(Tensor& record, int64_t shard, const Tensor& param_shard, const std::vector<Tensor>& buffers) {
  ops::Copy(Part(record, shard, 0), param_shard);
  for (size_t k = 0; k < buffers.size(); ++k) ops::Copy(Part(record, shard, k + 1), buffers[k]);
}

void ShardRecords::Shift(comm::ProcessGroup& group, size_t b, const Tensor& param_shard,
                         const std::vector<Tensor>& buffers, int64_t step) {
  if (receiving_step_ != step) {
    // Each copy's older slot takes the new step: the newer one is the step
    // the ranks may have to go back to until this one has landed everywhere.
    receiving_step_ = step;
    for (Copy& k : copies_) {
      k.receiving = k.slots[0].step <= k.slots[1].step ? 0 : 1;
      k.slots[k.receiving].step = -1;
    }
  }
  const int64_t s = plan_.shard(b);
  const std::string name = absl::StrCat("optimizer replica of bucket ", b);
  for (Copy& k : copies_) {
    Tensor& record = k.slots[k.receiving].buckets[b];
    shifts_.push_back(group.Shift(param_shard, Part(record, s, 0), k.distance, name));
    for (size_t j = 0; j < buffers_; ++j) {
      // A bucket without parameters (no buffers) sends zeros of its own.
      Tensor send = j < buffers.size() ? buffers[j] : Tensor::Zeros({s}, record.dtype());
      shifts_.push_back(group.Shift(send, Part(record, s, j + 1), k.distance, name));
    }
  }
}

absl::Status ShardRecords::WaitShifts(std::chrono::milliseconds timeout) {
  if (shifts_.empty()) return absl::OkStatus();
  const absl::Status first = comm::JoinedWork(std::move(shifts_), "optimizer replica shifts").Wait(timeout);
  shifts_.clear();
  for (Copy& k : copies_) {
    if (first.ok() && k.receiving >= 0) k.slots[k.receiving].step = receiving_step_;
    k.receiving = -1;
  }
  receiving_step_ = -1;
  return first;
}

const std::vector<Tensor>* ShardRecords::Previous(int64_t step) const {
  return enabled() && previous_.step == step && step >= 0 ? &previous_.buckets : nullptr;
}

const std::vector<Tensor>* ShardRecords::Replica(int c, int64_t step) const {
  if (step < 0 || c < 0 || c >= copies()) return nullptr;
  for (const Slot& slot : copies_[static_cast<size_t>(c)].slots) {
    if (slot.step == step) return &slot.buckets;
  }
  return nullptr;
}

bool ShardRecords::Replicated(int64_t step) const {
  for (int c = 0; c < copies(); ++c) {
    if (Replica(c, step) == nullptr) return false;
  }
  return true;
}

void ShardRecords::Refill(int64_t step, const std::function<void(size_t b, int owner, Tensor& record)>& fill) {
  previous_.step = -1;
  for (Copy& k : copies_) {
    k.slots[1].step = -1;
    for (size_t b = 0; b < k.slots[0].buckets.size(); ++b) fill(b, k.of, k.slots[0].buckets[b]);
    k.slots[0].step = step;
  }
}

}  // namespace psync::optim
