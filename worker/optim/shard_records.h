// ShardRecords: the copies of a sharded optimizer's state that live
// recovery (issue 32) rebuilds the job's state from when a rank is lost
// with --zero, whose optimizer state exists only in shards.
//
// A record of bucket b is one flat tensor of a rank's shard of it: the
// parameter values, then each state buffer (AdamW's two moments), s
// elements each (s = ShardPlan::shard(b)). This rank keeps
//   - previous: its own shard as it was before the step in progress (one
//     step back), so the ranks can go back to that step together;
//   - replicas: for each of `copies` ranks behind it (rank - c * distance
//     mod world, c = 1..copies), that rank's shard at the last two steps it
//     sent, so a lost rank's shard exists at either step on `copies` other
//     ranks: two copies survive any two losses (a second rank lost while
//     the first is recovered).
//
// Why two versions (the step protocol, ShardedOptimizer::Step): a step
// updates the own shard, then shifts it to the replica holder, then
// all-gathers the parameters; a rank reports a step as its own only once
// its gathers completed, and any rank's gathers completing means every
// rank has entered them, so every rank's shift of that step has landed.
// Hence after a loss the newest step any survivor reports (the one the
// coordinator restarts from) is either one every survivor updated and
// every replica received (the live shards and newest replicas), or one
// nobody finished (the previous records and older replicas). Each rank
// answers which it holds with Own/Replica below. ZeRO-3 has no gathers
// after a step (its forward gathers what it needs): there the next
// forward's first gather to complete plays their part (a rank enters it
// only after its shifts), GradientShards::ParametersWhole.
//
// Cost: 1 + 2 x copies records of (1 + buffers) x (parameters / world)
// elements, 15P/W for AdamW with two copies (P parameters, W ranks), and
// `copies` shifts of 3P/W a step.
//
// Records are CPU tensors: live recovery runs on CPU groups (CUDA jobs
// resume from a checkpoint, JobSession::RejoinGeneration).
//
// Threads: the training thread (the shifts' buffers are the group's
// between the shift and its completion).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "psync/comm/process_group.h"
#include "psync/tensor/tensor.h"
#include "worker/optim/gradient_shards.h"

namespace psync::optim {

class ShardRecords {
 public:
  // The records of `plan` (this rank's), `buffers` state buffers, dtype
  // per bucket; `copies` replicas (at most world - 1), of the ranks
  // c * distance behind (or the next free distance where that is this rank
  // or another copy's). Throws (allocation) as the tensor library does.
  void Reset(const ShardPlan& plan, size_t buffers, const std::vector<DType>& dtypes, int distance, int copies);
  bool enabled() const { return !copies_.empty(); }
  // Bytes of every record held.
  int64_t bytes() const;
  int copies() const { return static_cast<int>(copies_.size()); }
  // The rank whose shard copy c holds (in plan's numbering).
  int replica_of(int c) const { return copies_[static_cast<size_t>(c)].of; }

  // Before the update of step `step` + 1: this rank's live shard of bucket
  // b (`param_shard`, `buffers`) at `step` becomes the previous record.
  void KeepPrevious(size_t b, const Tensor& param_shard, const std::vector<Tensor>& buffers, int64_t step);
  // After the update to `step`: starts the shifts of bucket b's live shard
  // to its replica holders, receiving theirs into each copy's older slot
  // (forgotten until WaitShifts). Every rank, every bucket, in order.
  void Shift(comm::ProcessGroup& group, size_t b, const Tensor& param_shard, const std::vector<Tensor>& buffers,
             int64_t step);
  // Waits for the shifts started since the last call; the receiving slot
  // holds their step once every one of them succeeded. The first failure.
  absl::Status WaitShifts(std::chrono::milliseconds timeout);

  // The previous record when it is at `step` (null otherwise).
  const std::vector<Tensor>* Previous(int64_t step) const;
  // Copy c at `step` (null when neither of its slots holds it).
  const std::vector<Tensor>* Replica(int c, int64_t step) const;
  // Whether every copy holds `step`.
  bool Replicated(int64_t step) const;
  // After a whole state was loaded at `step`: one slot of every copy takes
  // its rank's shard from `fill` (called per bucket with the rank and the
  // record to write), the other slots and the previous record are forgotten.
  void Refill(int64_t step, const std::function<void(size_t b, int owner, Tensor& record)>& fill);

  // Writes a live shard (`param_shard`, `buffers`, s elements each) into
  // `record`; a bucket without parameters has no buffers: those parts stay.
  static void Pack(Tensor& record, int64_t shard, const Tensor& param_shard, const std::vector<Tensor>& buffers);
  // A record's parts: the parameter values and buffer k (s elements each).
  static Tensor Part(const Tensor& record, int64_t shard, size_t k) { return record.View(static_cast<int64_t>(k) * shard, {shard}); }

 private:
  struct Slot {
    int64_t step = -1;  // -1: nothing whole
    std::vector<Tensor> buckets;
  };
  struct Copy {
    int distance = 0;  // this rank sends its shard this far ahead
    int of = -1;       // and keeps the shard of the rank as far behind
    Slot slots[2];
    int receiving = -1;  // the slot the shifts in flight fill
  };
  ShardPlan plan_;
  size_t buffers_ = 0;
  Slot previous_;
  std::vector<Copy> copies_;  // empty: off
  int64_t receiving_step_ = -1;  // the step the shifts in flight carry
  std::vector<std::shared_ptr<comm::Work>> shifts_;  // started, not waited for
};

}  // namespace psync::optim
