// Hierarchical all-gather of a flat buffer, the reverse of
// hier/reduce_scatter.cc. Sharded layout: my shard goes to its place in
// the staging buffer (block = my local rank, part = my host), a Gloo
// all-gather of my block among the local-rank-j ranks of every host fills
// the block, an shm all-gather of the staging buffer fills every block,
// and the shards go back to their places in the tensor. Hosts of
// different sizes: every rank's shard is broadcast from its owner.
#include <cstring>

#include "psync/common/status_macros.h"
#include "worker/comm/flat_shard.h"
#include "worker/comm/hier/collectives.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::hier {

absl::Status Allgather(HierParts& p, const std::string& desc, const std::string& name, const Tensor& t) {
  const int world = p.topology.world_size(), hosts = p.topology.num_hosts();
  const size_t n = static_cast<size_t>(t.numel()), es = t.element_size();
  if (!p.sharded) {
    // Rare (uneven hosts) and simple: W broadcasts of one shard each.
    Tensor flat = t.Flatten();
    for (int r = 0; r < world; ++r) {
      const ShardRange g = ShardOf(n, world, r, es);
      if (g.empty()) continue;
      PSYNC_RETURN_IF_ERROR(
          Broadcast(p, desc, name, flat.View(static_cast<int64_t>(g.begin), {static_cast<int64_t>(g.size())}), r));
    }
    return absl::OkStatus();
  }
  const size_t s = ShardSize(n, world, es);
  Tensor staging = Tensor::Zeros({static_cast<int64_t>(s * static_cast<size_t>(world))}, t.dtype());
  char* base = static_cast<char*>(t.raw_data());
  char* stage = static_cast<char*>(staging.raw_data());
  const ShardRange own = ShardOf(n, world, p.rank, es);
  if (!own.empty()) std::memcpy(stage + StagingOffset(p, p.rank, s) * es, base + own.begin * es, own.size() * es);
  if (hosts > 1) {
    const size_t block = static_cast<size_t>(p.local->local_rank()) * static_cast<size_t>(hosts) * s;
    Tensor mine = staging.View(static_cast<int64_t>(block), {static_cast<int64_t>(s * static_cast<size_t>(hosts))});
    PSYNC_RETURN_IF_ERROR(WaitCross(p.cross->Allgather(mine, name), p, desc, "all-gather of this rank's block"));
  }
  PSYNC_RETURN_IF_ERROR(shm::Allgather(*p.local, desc, name, stage, static_cast<size_t>(staging.numel()), t.dtype()));
  for (int r = 0; r < world; ++r) {
    const ShardRange g = ShardOf(n, world, r, es);
    if (!g.empty() && r != p.rank) std::memcpy(base + g.begin * es, stage + StagingOffset(p, r, s) * es, g.size() * es);
  }
  return absl::OkStatus();
}

}  // namespace psync::comm::hier
