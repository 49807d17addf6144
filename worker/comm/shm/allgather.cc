// All-gather of shards (the second half of the sharded allreduce): every
// rank copies its shard's piece into its slot, then the other ranks' pieces
// out of theirs, each as soon as that peer published it.
#include <cstring>

#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"
#include "worker/comm/shm/shard_layout.h"

namespace psync::comm::shm {

absl::Status Allgather(ShmContext& ctx, const std::string& desc, const std::string& name, void* data, size_t count,
                       DType type) {
  if (ctx.local_size() == 1) return absl::OkStatus();
  ShmContext::Op op = MakeOp(desc, OpKind::kAllgather, name, count, type, -1);
  ctx.BeginOp(op);
  const int n = ctx.local_size(), me = ctx.local_rank();
  const size_t es = ElementSize(type);
  const ShardLayout lay(count, n, es, ctx.slot_bytes());
  const size_t piece_bytes = lay.piece() * es;
  char* base = static_cast<char*>(data);
  for (size_t r = 0; r < lay.rounds(); ++r) {
    PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ctx.BeginStep(op));
    const Range own = lay.piece(me, r);
    std::memcpy(ctx.Slot(me, s) + me * piece_bytes, base + own.begin * es, own.size() * es);
    ctx.Publish(kCopied, s);
    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      PSYNC_RETURN_IF_ERROR(ctx.WaitPeer(j, kCopied, s, op, "shard"));
      if (r == 0) PSYNC_RETURN_IF_ERROR(ctx.CheckDescriptor(j, op));
      const Range p = lay.piece(j, r);
      std::memcpy(base + p.begin * es, ctx.Slot(j, s) + j * piece_bytes, p.size() * es);
    }
    ctx.Publish(kConsumed, s);
  }
  return absl::OkStatus();
}

}  // namespace psync::comm::shm
