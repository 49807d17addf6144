// ReducerOptions: how DistributedDataParallel's reducer averages gradients
// (bucket caps, unused parameters, the comm hook, ZeRO). DdpOptions
// (ddp.h) extends it with what only the wrapper does.
#pragma once

#include <chrono>
#include <memory>

#include "psync/common/bucket_packer.h"
#include "psync/ddp/comm_hook.h"

namespace psync::ddp {

// What happens to the bucket layout after the first synchronised backward.
enum class RebuildMode {
  // Rank 0's observed ready order is broadcast over the process group and
  // every rank rebuilds its buckets from it (like PyTorch DDP).
  kBroadcastFromRank0,
  // Only record the order (recorded_ready_order()); the caller supplies a
  // plan with ApplyBucketPlan (the coordinator does, from rank reports).
  kExternal,
  // Keep the initial (reverse registration order) buckets.
  kNone,
};

struct ReducerOptions {
  // The caps (include/psync/common/bucket_packer.h; psync-worker: --bucket-cap-mb,
  // --first-bucket-mb). Checked by Create.
  BucketCaps bucket_caps;
  bool find_unused_parameters = false;
  // Bound on Finalize's wait for the collectives (and the global used map).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  RebuildMode rebuild = RebuildMode::kBroadcastFromRank0;
  // What reduces a full bucket (comm_hook.h); null = AllreduceHook().
  std::shared_ptr<CommHook> comm_hook;
  // Exchange and compare the step tags (step_check.h) in every synchronised
  // backward (world > 1). Off only to measure what the check costs.
  bool check_in_step = true;
  // ZeRO: 0 = every rank averages every gradient (allreduce); 1 = each
  // bucket is reduce-scattered (this rank keeps the average of its 1/W
  // shard) and the parameters live in flat buffers the sharded optimizer
  // all-gathers; 2 = also only the shards are kept between steps (one
  // staging bucket for backward); 3 = the parameters too: a rank keeps its
  // 1/W of them and gathers a module's just before its forward and again
  // before its backward (the module's forward hooks, psync/nn/module.h).
  // Needs the default comm hook.
  int zero_stage = 0;
  // --zero=3: buckets whose gather starts ahead of the one a module needs
  // (the window is this many buckets plus those in use).
  int zero3_prefetch = 1;
  // --zero=3: release a module's parameters after its forward (gathered
  // again for backward); false keeps them from forward to backward.
  bool reshard_after_forward = true;
};

}  // namespace psync::ddp
