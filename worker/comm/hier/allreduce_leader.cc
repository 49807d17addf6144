// Hierarchical allreduce for hosts with different numbers of ranks: shm
// reduce to local rank 0, Gloo allreduce among the local rank 0s, shm
// broadcast from local rank 0.
#include "psync/common/status_macros.h"
#include "worker/comm/hier/collectives.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::hier {

absl::Status AllreduceLeader(HierParts& p, const std::string& desc, const std::string& name, const Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  void* data = t.raw_data();
  PSYNC_RETURN_IF_ERROR(shm::Reduce(*p.local, desc, name, data, n, t.dtype(), 0));
  if (p.is_leader() && p.leaders->size() > 1) {
    PSYNC_RETURN_IF_ERROR(WaitCross(p.leaders->AllreduceSum(t, name), p, desc, "allreduce among host leaders"));
  }
  return shm::Broadcast(*p.local, desc, name, data, t.nbytes(), 0);
}

}  // namespace psync::comm::hier
