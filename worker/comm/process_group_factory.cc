#include "worker/comm/process_group_factory.h"

#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "worker/comm/gloo/gloo_group.h"
#include "worker/comm/hier/hier_group.h"
#include "worker/comm/shm/shm_group.h"
#include "worker/comm/shm/spin_policy.h"
#if defined(PSYNC_WITH_NCCL)
#include "worker/comm/nccl/nccl_group.h"
#endif

namespace psync::comm {

bool NcclBackendBuilt() {
#if defined(PSYNC_WITH_NCCL)
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateProcessGroup(const std::string& backend,
                                                                 std::shared_ptr<Store> store, int rank, int size,
                                                                 const GroupOptions& options) {
  if (backend == "gloo") {
    GlooOptions o;
    o.hostname = options.hostname;
    o.iface = options.iface;
    o.timeout = options.timeout;
    o.prefix = options.prefix;
    return GlooGroup::Create(std::move(store), rank, size, std::move(o));
  }
  if (backend == "nccl") {
#if defined(PSYNC_WITH_NCCL)
    NcclOptions o;
    o.device = options.device;
    o.timeout = options.timeout;
    o.prefix = options.prefix;
    return NcclGroup::Create(std::move(store), rank, size, std::move(o));
#else
    return absl::FailedPreconditionError("backend 'nccl' is not available: psync was built without CUDA/NCCL");
#endif
  }
  if (backend == "shm") {
    if (options.topology.known() && !options.topology.single_host()) {
      return absl::InvalidArgumentError(absl::StrCat("backend 'shm' needs every rank on one host; the job spans ",
                                                     options.topology.Describe(), " (use 'hier')"));
    }
    shm::ShmOptions o;
    o.timeout = options.timeout;
    o.prefix = options.prefix;
    o.job_tag = options.job_tag;
    o.slot_bytes = options.shm_slot_bytes;
    o.small_bytes = options.shm_small_bytes;
    PSYNC_ASSIGN_OR_RETURN(o.spin, shm::ResolveSpin(options.shm_spin_us));
    return ShmGroup::Create(std::move(store), rank, size, std::move(o));
  }
  if (backend == "hier") return HierGroup::Create(std::move(store), rank, size, options);
  return absl::InvalidArgumentError(absl::StrCat("unknown process group backend '", backend,
                                                 "' (expected gloo, nccl, shm or hier)"));
}

}  // namespace psync::comm
