// Hierarchical reduce-scatter of a flat buffer (global shards by
// comm/flat_shard.h over the whole world).
//
// Every host holds L ranks (sharded layout): the ranks with local rank j,
// one per host, own the world's shards S_j = {shard of ranks_on_host(h)[j]
// for every host h}. So:
//   1. copy the tensor into a staging buffer of L blocks, block j = the
//      shards S_j in host order (W x s elements: shards of equal length s);
//   2. shm reduce-scatter of the staging buffer: local rank j gets the
//      host's sum of block j;
//   3. Gloo reduce-scatter of block j among the local-rank-j ranks (the
//      cross group, ranked by host): host h's rank gets the world's sum of
//      part h, which is its own shard; copy it back into the tensor.
// Cross-host traffic per rank: (H-1)/H of 1/L of the buffer each way.
// Hosts of different sizes: the leader allreduce (every rank ends with the
// whole sum, its shard included).
#include <cstring>

#include "psync/common/status_macros.h"
#include "worker/comm/flat_shard.h"
#include "worker/comm/hier/collectives.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::hier {

size_t StagingOffset(const HierParts& p, int rank, size_t shard) {
  const int hosts = p.topology.num_hosts();
  const size_t block = static_cast<size_t>(p.topology.local_rank(rank));
  return (block * static_cast<size_t>(hosts) + static_cast<size_t>(p.topology.host_index(rank))) * shard;
}

absl::Status ReduceScatter(HierParts& p, const std::string& desc, const std::string& name, const Tensor& t) {
  if (!p.sharded) return AllreduceLeader(p, desc, name, t);
  const int world = p.topology.world_size(), hosts = p.topology.num_hosts();
  const size_t n = static_cast<size_t>(t.numel()), es = t.element_size();
  const size_t s = ShardSize(n, world, es);
  Tensor staging = Tensor::Zeros({static_cast<int64_t>(s * static_cast<size_t>(world))}, t.dtype());
  char* base = static_cast<char*>(t.raw_data());
  char* stage = static_cast<char*>(staging.raw_data());
  for (int r = 0; r < world; ++r) {
    const ShardRange g = ShardOf(n, world, r, es);
    if (!g.empty()) std::memcpy(stage + StagingOffset(p, r, s) * es, base + g.begin * es, g.size() * es);
  }
  PSYNC_RETURN_IF_ERROR(
      shm::ReduceScatter(*p.local, desc, name, stage, static_cast<size_t>(staging.numel()), t.dtype()));
  if (hosts > 1) {
    const size_t block = static_cast<size_t>(p.local->local_rank()) * static_cast<size_t>(hosts) * s;
    Tensor mine = staging.View(static_cast<int64_t>(block), {static_cast<int64_t>(s * static_cast<size_t>(hosts))});
    PSYNC_RETURN_IF_ERROR(WaitCross(p.cross->ReduceScatterSum(mine, name), p, desc, "reduce-scatter of this rank's block"));
  }
  const ShardRange own = ShardOf(n, world, p.rank, es);
  if (!own.empty()) std::memcpy(base + own.begin * es, stage + StagingOffset(p, p.rank, s) * es, own.size() * es);
  return absl::OkStatus();
}

}  // namespace psync::comm::hier
