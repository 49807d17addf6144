// Hierarchical barrier: shm barrier, Gloo barrier among the host leaders,
// shm barrier (so nobody leaves before every host arrived).
#include "psync/common/status_macros.h"
#include "worker/comm/hier/collectives.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::hier {

absl::Status Barrier(HierParts& p, const std::string& desc) {
  PSYNC_RETURN_IF_ERROR(shm::Barrier(*p.local, desc));
  if (p.is_leader() && p.leaders->size() > 1) {
    absl::Status st = p.leaders->Barrier(p.timeout);
    if (!st.ok()) return Annotate(st, absl::StrCat(desc, ": barrier among host leaders"));
  }
  return shm::Barrier(*p.local, desc);
}

}  // namespace psync::comm::hier
