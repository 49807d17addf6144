// Broadcast from a local root, in slot-sized chunks: the root copies a chunk
// into its slot, the others copy it out.
#include <algorithm>
#include <cstring>

#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::shm {

absl::Status Broadcast(ShmContext& ctx, const std::string& desc, const std::string& name, void* data, size_t bytes,
                       int root) {
  if (ctx.local_size() == 1) return absl::OkStatus();
  ShmContext::Op op = MakeOp(desc, OpKind::kBroadcast, name, bytes, kFloat32, root);
  ctx.BeginOp(op);
  const int me = ctx.local_rank();
  const size_t chunk = ctx.slot_bytes();
  const size_t rounds = std::max<size_t>(1, (bytes + chunk - 1) / chunk);
  char* base = static_cast<char*>(data);
  for (size_t r = 0; r < rounds; ++r) {
    PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ctx.BeginStep(op));
    const size_t off = r * chunk, len = std::min(chunk, bytes - std::min(bytes, off));
    if (me == root && len > 0) std::memcpy(ctx.Slot(me, s), base + off, len);
    ctx.Publish(kCopied, s);
    if (r == 0) {
      PSYNC_RETURN_IF_ERROR(ctx.WaitAll(kCopied, s, op, "chunk"));
      PSYNC_RETURN_IF_ERROR(ctx.CheckAllDescriptors(op));
    } else if (me != root) {
      PSYNC_RETURN_IF_ERROR(ctx.WaitPeer(root, kCopied, s, op, "chunk"));
    }
    if (me != root && len > 0) std::memcpy(base + off, ctx.Slot(root, s), len);
    ctx.Publish(kConsumed, s);
  }
  return absl::OkStatus();
}

}  // namespace psync::comm::shm
