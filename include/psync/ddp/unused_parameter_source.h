// UnusedParameterSource: where the reducer learns, each iteration, which
// parameters were used on at least one rank.
//
// With find_unused_parameters the reducer submits its local "used" bitmap
// (one byte per parameter, OR-ed over a no_sync window) right after it
// launched its last bucket, at the same point of the same iteration on every
// rank, and asks for the global bitmap in finalize. A parameter unused on
// every rank keeps its grad untouched (undefined stays undefined, so SGD
// skips it); a parameter unused here but used elsewhere contributes zeros
// and gets the averaged gradient.
//
// Implementations:
//  * AllreduceUnusedParameterSource (default): an allreduce of the bitmaps
//    over the data-plane process group, queued after the bucket collectives.
//  * the runtime's coordinator source (next issue): Submit rides on the
//    per-iteration Report, GlobalUsed waits for the Plan.
//
// Threads: Submit and GlobalUsed are called on the backward thread, in
// iteration order, at most once each per iteration.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "psync/comm/process_group.h"
#include "psync/tensor/tensor.h"

namespace psync::ddp {

class UnusedParameterSource {
 public:
  virtual ~UnusedParameterSource() = default;
  // Hands over this rank's used bitmap (1 = got a gradient) of `iteration`.
  virtual void Submit(int64_t iteration, const std::vector<uint8_t>& local_used) = 0;
  // The global bitmap of `iteration` (1 = used on at least one rank). Blocks
  // up to `timeout`.
  virtual absl::StatusOr<std::vector<uint8_t>> GlobalUsed(int64_t iteration,
                                                          std::chrono::milliseconds timeout) = 0;
  // True when the global bitmap of an iteration can be known while its
  // backward runs, before this rank launched its last bucket (the
  // coordinator's plan: every rank reports its used set right after
  // forward). Then the reducer skips buckets unused on every rank
  // (unused_buckets.h). The allreduce source learns it only after the last
  // launch: false.
  virtual bool KnowsAhead() const { return false; }
  // The global bitmap of `iteration` if known now (never blocks).
  virtual std::optional<std::vector<uint8_t>> TryGlobalUsed(int64_t iteration) {
    (void)iteration;
    return std::nullopt;
  }
};

class AllreduceUnusedParameterSource : public UnusedParameterSource {
 public:
  // `device`: where the bitmap tensor lives (the group's device: CPU for
  // Gloo, the rank's GPU for NCCL).
  AllreduceUnusedParameterSource(std::shared_ptr<comm::ProcessGroup> group, Device device);
  void Submit(int64_t iteration, const std::vector<uint8_t>& local_used) override;
  absl::StatusOr<std::vector<uint8_t>> GlobalUsed(int64_t iteration, std::chrono::milliseconds timeout) override;

 private:
  struct Pending {
    Tensor counts;  // per parameter: number of ranks that used it
    std::shared_ptr<comm::Work> work;
  };
  std::shared_ptr<comm::ProcessGroup> group_;
  Device device_;
  std::map<int64_t, Pending> pending_;  // backward thread only
};

}  // namespace psync::ddp
