// The hierarchical collectives, one per file, run on HierGroup's
// communication thread: shared memory within the host (shm/collectives.h),
// Gloo between hosts (HierParts::cross / leaders). Every rank of a host runs
// the same sequence of local collectives, so the local step protocol stays
// in lock step.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/hier/hier_parts.h"
#include "psync/tensor/tensor.h"

namespace psync::comm::hier {

// Every host holds the same number of ranks: shm reduce-scatter, Gloo
// allreduce of my shard among my local rank's peers, shm all-gather.
absl::Status AllreduceSharded(HierParts& p, const std::string& desc, const std::string& name, const Tensor& t);
// Any layout: shm reduce to local rank 0, Gloo allreduce among the local
// rank 0s, shm broadcast.
absl::Status AllreduceLeader(HierParts& p, const std::string& desc, const std::string& name, const Tensor& t);
// Flat-buffer reduce-scatter and all-gather over the whole world (shards by
// comm/flat_shard.h); hier/reduce_scatter.cc, allgather.cc.
absl::Status ReduceScatter(HierParts& p, const std::string& desc, const std::string& name, const Tensor& t);
absl::Status Allgather(HierParts& p, const std::string& desc, const std::string& name, const Tensor& t);
// Where global rank `rank`'s shard of `shard` elements sits in their
// staging buffer: block (its local rank), part (its host).
size_t StagingOffset(const HierParts& p, int rank, size_t shard);
absl::Status Broadcast(HierParts& p, const std::string& desc, const std::string& name, const Tensor& t, int root);
absl::StatusOr<std::vector<std::string>> AllgatherBytes(HierParts& p, const std::string& desc, const std::string& bytes);
absl::Status Barrier(HierParts& p, const std::string& desc);

// Waits for a cross-host Work with the group's timeout, naming the stage.
absl::Status WaitCross(const std::shared_ptr<Work>& work, const HierParts& p, const std::string& desc,
                       const char* stage);

}  // namespace psync::comm::hier
