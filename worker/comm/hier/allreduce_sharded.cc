// Hierarchical allreduce when every host holds L ranks: shm reduce-scatter
// (local rank j gets the host's sum of shard j), Gloo allreduce of shard j
// among the local-rank-j ranks of all hosts (L groups, disjoint shards, in
// parallel), shm all-gather. Cross-host traffic per rank: 2/L of the tensor.
#include "psync/common/status_macros.h"
#include "worker/comm/hier/collectives.h"
#include "worker/comm/shm/collectives.h"
#include "worker/comm/shm/shard_layout.h"

namespace psync::comm::hier {

absl::Status WaitCross(const std::shared_ptr<Work>& work, const HierParts& p, const std::string& desc,
                       const char* stage) {
  absl::Status st = work->Wait(p.timeout);
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat(desc, ": ", stage, " across hosts (Gloo group of global ",
                                              p.cross_ranks, "; its rank i is the i-th of them): ",
                                              std::string(st.message())));
}

absl::Status AllreduceSharded(HierParts& p, const std::string& desc, const std::string& name, const Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  void* data = t.raw_data();
  PSYNC_RETURN_IF_ERROR(shm::ReduceScatter(*p.local, desc, name, data, n, t.dtype()));
  if (p.cross->size() > 1) {
    const shm::ShardLayout lay(n, p.local->local_size(), t.element_size(), p.local->slot_bytes());
    const shm::Range mine = lay.shard(p.local->local_rank());
    if (mine.size() > 0) {
      Tensor shard = t.Flatten().View(static_cast<int64_t>(mine.begin), {static_cast<int64_t>(mine.size())});
      PSYNC_RETURN_IF_ERROR(WaitCross(p.cross->AllreduceSum(shard, name), p, desc, "allreduce of this rank's shard"));
    }
  }
  return shm::Allgather(*p.local, desc, name, data, n, t.dtype());
}

}  // namespace psync::comm::hier
