// GradientShards: what a sharded optimizer (sharded_optimizer.h) steps on,
// given by the data-parallel layer (ddp/zero_buckets.h implements it).
//
// The parameters are packed into flat buckets, the same on every rank;
// every bucket's buffer has `padded` elements (a multiple of the world
// size, comm/flat_shard.h) and rank r owns the contiguous shard
// [r*s, (r+1)*s), s = padded / world. After each synchronised backward the
// data-parallel layer holds, for every bucket it reduced, the gradient
// averaged over the ranks on this rank's shard (a reduce-scatter); the
// parameters' values live in flat parameter buffers of the same layout, so
// once this rank updated its shard of a bucket, an all-gather of that
// bucket gives every rank every updated value.
//
// Threads: the training thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "psync/autograd/variable.h"
#include "psync/comm/process_group.h"
#include "psync/tensor/tensor.h"

namespace psync::optim {

struct FlatBucket {
  std::vector<size_t> params;    // parameter indices (registration order numbering)
  std::vector<int64_t> offsets;  // element offset of each parameter in the bucket
  int64_t padded = 0;            // elements of the flat buffer, a multiple of the world size
};

struct ShardPlan {
  int world = 1;
  int rank = 0;
  std::vector<FlatBucket> buckets;
  // Elements of every rank's shard of bucket b.
  int64_t shard(size_t b) const { return buckets[b].padded / world; }
};

class GradientShards {
 public:
  virtual ~GradientShards() = default;
  // The parameters, in the numbering of the plan (the module's registration order).
  virtual const std::vector<autograd::Variable>& parameters() const = 0;
  // The layout. It changes only between steps (a new bucket plan); every
  // change gets a new version().
  virtual const ShardPlan& plan() const = 0;
  virtual uint64_t version() const = 0;
  // This rank's shard of bucket b's averaged gradient (shard(b) elements)
  // after the last synchronised backward; undefined when that backward did
  // not reduce the bucket (every parameter in it unused on every rank).
  virtual Tensor GradShard(size_t b) const = 0;
  // Whether parameter i got a gradient on some rank in the last
  // synchronised backward (else the optimizer leaves it untouched).
  virtual bool HasGrad(size_t i) const = 0;
  // Starts the all-gather of bucket b's parameter values, once this rank
  // wrote its shard of them (the same buckets in the same order on every
  // rank). Nothing may read the parameters until WaitParameters returned:
  // the data-parallel layer waits before the next forward (so the gathers
  // overlap whatever runs between the step and it), the optimizer before it
  // touches them again.
  virtual void GatherParameters(size_t b) = 0;
  // Waits for every gather started so far; the first failure (named), once.
  virtual absl::Status WaitParameters() = 0;
  // False from a round of gathers that failed (WaitParameters) until one
  // succeeds: this rank's parameters outside its shards are then torn.
  // ZeRO-3 (whose gathers are the next forward's): false from
  // GatherParameters until one gather issued after it completed, so every
  // rank has entered it (live recovery's step protocol, shard_records.h).
  virtual bool ParametersWhole() const = 0;
  // Bucket b's flat parameter buffer (`padded` elements): rank r's shard of
  // it is [r*s, (r+1)*s). Live recovery reads the owned shard from it.
  // Undefined when the parameters are sharded too (ZeRO-3).
  virtual Tensor ParamBuffer(size_t b) const = 0;
  // This rank's shard of bucket b's parameter values (shard(b) elements):
  // what the optimizer updates in place before GatherParameters(b).
  virtual Tensor OwnParamShard(size_t b) const = 0;
  virtual comm::ProcessGroup& group() const = 0;
  // Bound on the optimizer's waits for its collectives.
  virtual std::chrono::milliseconds timeout() const = 0;
};

}  // namespace psync::optim
