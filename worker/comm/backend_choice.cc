#include "worker/comm/backend_choice.h"

#include "absl/strings/str_cat.h"

namespace psync::comm {

absl::StatusOr<BackendChoice> ChooseBackend(const std::string& requested, const Topology& topology, int world_size,
                                            bool cuda) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--backend=", requested, ": ", why));
  };
  if (requested != "auto" && requested != "gloo" && requested != "shm" && requested != "nccl" &&
      requested != "hier") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend: '", requested, "' is not one of auto|gloo|shm|nccl|hier"));
  }
  const std::string where = topology.known() ? topology.Describe() : std::string("host layout unknown");
  if (cuda) {
    if (requested == "auto") return BackendChoice{"nccl", "CUDA tensors: NCCL (its own intra/inter-node hierarchy)"};
    if (requested == "nccl") return BackendChoice{"nccl", "requested"};
    if (requested == "shm") {
      if (topology.known() && !topology.single_host()) {
        return bad(absl::StrCat("needs every rank on one host, but the job spans ", topology.Describe(),
                                "; with --device=cuda use --backend=nccl (or auto)"));
      }
      return BackendChoice{"shm", absl::StrCat("requested: CUDA buckets staged through pinned host memory (", where,
                                               "; ranks may share a GPU)")};
    }
    return bad("reduces CPU tensors; with --device=cuda use --backend=nccl (or auto), or shm on one host");
  }
  if (requested == "nccl") return bad("needs --device=cuda (CUDA tensors); on CPU use auto, gloo, shm or hier");
  if (requested == "gloo") return BackendChoice{"gloo", absl::StrCat("requested (", where, ")")};
  if (requested == "shm") {
    if (topology.known() && !topology.single_host()) {
      return bad(absl::StrCat("needs every rank on one host, but the job spans ", topology.Describe(),
                              "; use --backend=hier or auto"));
    }
    return BackendChoice{"shm", absl::StrCat("requested (", where, ")")};
  }
  if (requested == "hier") {
    if (!topology.known()) {
      return bad("needs to know which ranks share a host: set LOCAL_RANK and LOCAL_WORLD_SIZE (or PSYNC_HOST_ID) on "
                 "every worker");
    }
    return BackendChoice{"hier", absl::StrCat("requested (", where, ")")};
  }
  // auto
  if (world_size <= 1) return BackendChoice{"gloo", "one rank: nothing to reduce"};
  if (!topology.known()) {
    return BackendChoice{"gloo", "host layout unknown (no LOCAL_WORLD_SIZE / PSYNC_HOST_ID): Gloo over TCP"};
  }
  if (topology.single_host()) {
    return BackendChoice{"shm", absl::StrCat(topology.Describe(), ": shared memory")};
  }
  if (topology.max_local_size() == 1) {
    return BackendChoice{"gloo", absl::StrCat(topology.Describe(), ", one rank per host: Gloo over TCP")};
  }
  return BackendChoice{"hier", absl::StrCat(topology.Describe(), ": shared memory within hosts, Gloo across")};
}

}  // namespace psync::comm
