// HierParts: the pieces a hierarchical collective is built from (see
// hier_group.h), shared by the group and its communication thread.
#pragma once

#include <chrono>
#include <memory>

#include "psync/comm/process_group.h"
#include "worker/comm/shm/shm_context.h"
#include "worker/comm/topology.h"

namespace psync::comm::hier {

struct HierParts {
  Topology topology;
  int rank = 0;
  std::chrono::milliseconds timeout{30000};
  // This host's ranks, through shared memory.
  std::shared_ptr<shm::ShmContext> local;
  // Sharded layout (every host holds L ranks): the ranks with my local
  // rank, one per host, ranked by host index. Leader layout: the local rank
  // 0s only (null on the other ranks).
  std::shared_ptr<ProcessGroup> cross;
  // The local rank 0s, one per host (on local rank 0: the same group as
  // `cross`); null on the other ranks.
  std::shared_ptr<ProcessGroup> leaders;
  bool sharded = false;
  // "ranks 1, 3": the global ranks of `cross` in its rank order, so its
  // errors (which number peers within the cross group) can be read.
  std::string cross_ranks;

  int host() const { return topology.host_index(rank); }
  bool is_leader() const { return local->local_rank() == 0; }
};

}  // namespace psync::comm::hier
