// Step check: every rank must reduce the same synchronised backward
// together. If one rank skips a backward or runs an extra one, the bucket
// collectives still pair up (same shapes), silently averaging gradients of
// different iterations (PyTorch DDP does that, then hangs at the end). So
// each synchronised backward carries an identity every rank must agree on:
//
//   iteration   the caller's training iteration (Reducer::DeclareIteration;
//               without it, the sequence number)
//   sequence    how many synchronised backwards this reducer finished before
//   plan id     a hash of the bucket plan (which bucket holds which
//               parameters: equal plans mean equal bucket indices and sizes)
//
// The tags travel as world rows of kStepTagFloats floats: rank r fills row
// r, zeros elsewhere, so an allreduce sum is an allgather (one non-zero term
// per element: exact on every backend). With the default hook they ride at
// the end of bucket 0's buffer (no extra collective; the hook's 1/world
// scaling is undone on decoding, exact because every piece is a 12-bit
// integer); with other hooks (compression would round them) the reducer
// issues one small allreduce of its own before bucket 0. Finalize compares
// them before anything else; every rank decodes the same values, so every
// rank reaches the same verdict and names the same rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/ddp/bucket_assignment.h"
#include "psync/tensor/tensor.h"

namespace psync::ddp {

struct StepTag {
  int64_t iteration = 0;
  int64_t sequence = 0;
  uint32_t plan_id = 0;
  bool operator==(const StepTag& o) const {
    return iteration == o.iteration && sequence == o.sequence && plan_id == o.plan_id;
  }
  bool operator!=(const StepTag& o) const { return !(*this == o); }
};

// Floats per rank in the exchanged tensor (iteration and sequence: 48 bits
// each, plan id 32 bits (36), in 12-bit pieces).
inline constexpr int64_t kStepTagFloats = 11;

// FNV-1a over the plan's buckets and their parameter indices.
uint32_t BucketPlanId(const BucketPlan& plan);

// The float32 tensor [world * kStepTagFloats] rank `rank` contributes.
// iteration and sequence must lie in [-2^47, 2^47).
Tensor EncodeStepTag(const StepTag& tag, int rank, int world, Device device);
// Every rank's tag from the reduced tensor: the sum of every rank's
// EncodeStepTag, multiplied by `scale` (1, or 1/world when it travelled in an
// averaged bucket). InvalidArgument when it is not that (a peer paired the
// exchange with another collective).
absl::StatusOr<std::vector<StepTag>> DecodeStepTags(const Tensor& reduced, int world, float scale = 1.0f);

// OK when every tag equals every other. Otherwise Aborted, naming the
// rank(s) out of step and every rank's iteration: "DDP: rank 1 is out of
// step: it is at iteration 6, rank 0 at iteration 5, ..." (tagged with exit
// code 4, include/psync/common/exit_code.h, when it names them). Who is out of step: with `last_agreed` (the tag of
// the previous synchronised backward every rank agreed on), the ranks whose
// iteration moved differently from their sequence since then; else the
// minority. `me` is the rank reporting.
absl::Status CompareStepTags(const std::vector<StepTag>& tags, const std::optional<StepTag>& last_agreed, int me);

// "0", "0, 2-5": a sorted rank list, runs collapsed.
std::string RankList(const std::vector<int>& ranks);

}  // namespace psync::ddp
