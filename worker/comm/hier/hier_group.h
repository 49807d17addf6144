// HierGroup: the ProcessGroup of a job that spans hosts, for CPU tensors.
// Within each host the ranks reduce through shared memory (shm/); only what
// must cross hosts goes over Gloo.
//
// Allreduce, when every host holds the same number L of ranks
// (hier/allreduce_sharded.cc):
//   1. shm reduce-scatter: local rank j ends with the host's sum of shard j;
//   2. Gloo allreduce of shard j among the ranks with local rank j, one per
//      host (L cross-host groups working on disjoint shards in parallel);
//   3. shm all-gather of the shards.
// Otherwise (hier/allreduce_leader.cc): shm reduce to local rank 0, Gloo
// allreduce among the local rank 0s, shm broadcast.
// Broadcast, AllgatherBytes and Barrier go the leader way (they are not hot).
// Reduce-scatter and all-gather of flat buffers: hier/reduce_scatter.cc,
// hier/allgather.cc (shm within the host, Gloo among the ranks with the
// same local rank; a leader fallback for hosts of different sizes).
//
// Summation order is fixed (local rank order within a host; the cross-host
// order is Gloo's, the same on every rank of a run), so all ranks get the
// same bits.
//
// Threads: one communication thread (internal::SerialQueue) runs each
// collective's three stages in issue order; the Gloo groups run their parts
// on their own threads. Abort (any thread) poisons the queue, aborts the shm
// context and every Gloo group, so the running stage returns at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "psync/comm/process_group.h"
#include "worker/comm/process_group_factory.h"
#include "worker/comm/serial_queue.h"
#include "worker/comm/hier/hier_parts.h"

namespace psync::comm {

class HierGroup : public ProcessGroup {
 public:
  // options.topology must be known and cover `size` ranks. The cross-host
  // groups use options.hostname / iface like GlooGroup, with store prefixes
  // under options.prefix.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(std::shared_ptr<Store> store, int rank, int size,
                                                             const GroupOptions& options);
  ~HierGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "hier"; }

  std::shared_ptr<Work> AllreduceSum(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> ReduceScatterSum(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> Allgather(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> Broadcast(Tensor tensor, int root, const std::string& name) override;
  absl::StatusOr<std::vector<std::string>> AllgatherBytes(const std::string& bytes,
                                                          std::chrono::milliseconds timeout) override;
  absl::Status Barrier(std::chrono::milliseconds timeout) override;
  void Abort(const absl::Status& reason) override;


 private:
  HierGroup(int rank, int size, std::shared_ptr<hier::HierParts> parts);
  std::string Describe(const char* what, const std::string& name, const Tensor& t) const;
  std::shared_ptr<Work> Flat(Tensor tensor, const std::string& name, bool sum);

  const int rank_;
  const int size_;
  std::shared_ptr<hier::HierParts> parts_;
  std::shared_ptr<internal::SerialQueue> queue_;
};

}  // namespace psync::comm
