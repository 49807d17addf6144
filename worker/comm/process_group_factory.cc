#include "worker/comm/process_group_factory.h"

#include "absl/strings/str_cat.h"
#include "worker/comm/gloo/gloo_group.h"
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
  return absl::InvalidArgumentError(absl::StrCat("unknown process group backend '", backend,
                                                 "' (expected \"gloo\" or \"nccl\")"));
}

}  // namespace psync::comm
