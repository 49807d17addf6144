// Hierarchical broadcast from global rank `root`: shm broadcast on root's
// host, Gloo broadcast among the host leaders from root's host, then shm
// broadcast from the leader on every other host.
#include "psync/common/status_macros.h"
#include "worker/comm/hier/collectives.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::hier {

absl::Status Broadcast(HierParts& p, const std::string& desc, const std::string& name, const Tensor& t, int root) {
  const int root_host = p.topology.host_index(root);
  const bool on_root_host = p.host() == root_host;
  if (on_root_host) {
    PSYNC_RETURN_IF_ERROR(shm::Broadcast(*p.local, desc, name, t.raw_data(), t.nbytes(), p.topology.local_rank(root)));
  }
  if (p.is_leader() && p.leaders->size() > 1) {
    PSYNC_RETURN_IF_ERROR(WaitCross(p.leaders->Broadcast(t, root_host, name), p, desc, "broadcast among host leaders"));
  }
  if (!on_root_host) PSYNC_RETURN_IF_ERROR(shm::Broadcast(*p.local, desc, name, t.raw_data(), t.nbytes(), 0));
  return absl::OkStatus();
}

}  // namespace psync::comm::hier
