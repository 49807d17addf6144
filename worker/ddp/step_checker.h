// StepChecker: the reducer's step check (step_check.h) as one piece of
// state: every synchronised backward, Issue puts this rank's tag in bucket
// 0's tail (fused: the default hook averages it with the gradients) or in
// an allreduce of its own just before bucket 0; Verify, first thing in
// finalize, waits for that exchange and compares every rank's tag.
//
// Threads: the backward thread (the reducer's).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "psync/comm/process_group.h"
#include "worker/ddp/reducer_trace.h"
#include "worker/ddp/step_check.h"

namespace psync::ddp {

class StepChecker {
 public:
  // `enabled`: ReducerOptions::check_in_step (and world > 1); `fused`: the
  // tags ride in bucket 0's buffer (the hook CarriesStepTag).
  StepChecker(comm::ProcessGroup& group, Device device, bool enabled, bool fused)
      : group_(group), device_(device), enabled_(enabled && group.size() > 1), fused_(enabled_ && fused) {}

  bool fused() const { return fused_; }
  // The floats bucket 0 needs after its slots.
  int64_t tail_elements() const { return fused_ ? group_.size() * kStepTagFloats : 0; }
  // DeclareIteration; sticky.
  void Declare(int64_t iteration) { declared_ = iteration; }
  // Per backward: nothing issued yet.
  void Reset();
  // At the first hook of a synchronised backward, before bucket 0 launches.
  // `bucket0_tail`: bucket 0's tail when fused.
  absl::Status Issue(int64_t sequence, uint32_t plan_id, const Tensor& bucket0_tail);
  // In finalize: OK when every rank agreed (or nothing was issued); else the
  // error (the exchange's failure, or the Aborted verdict naming the rank out
  // of step, after a bounded barrier so every peer has its own verdict).
  // `bucket0_work`: bucket 0's Work when fused.
  absl::Status Verify(const std::shared_ptr<comm::Work>& bucket0_work, size_t num_buckets,
                      TraceClock::time_point deadline);

 private:
  comm::ProcessGroup& group_;
  const Device device_;
  const bool enabled_;
  const bool fused_;
  std::optional<int64_t> declared_;   // DeclareIteration
  std::optional<StepTag> last_agreed_;  // tag of the last backward every rank agreed on
  // Per backward:
  bool issued_ = false;
  StepTag tag_;                      // this rank's
  Tensor tensor_;                    // where the reduced tags land: bucket 0's tail, or its own buffer
  std::shared_ptr<comm::Work> work_;  // the check's own allreduce (not fused)
};

}  // namespace psync::ddp
