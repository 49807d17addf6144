// Reduce-scatter (the first half of the sharded allreduce): afterwards this
// rank's shard of the tensor holds the sum of everyone's shard. The
// hierarchical allreduce runs this, then the cross-host allreduce of the
// shard, then AllGather.
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "common/status_macros.h"
#include "worker/comm/shm/collectives.h"
#include "worker/comm/shm/shard_layout.h"

namespace psync::comm::shm {

absl::Status ReduceScatter(ShmContext& ctx, const std::string& desc, const std::string& name, void* data,
                           size_t count, DType type) {
  if (ctx.local_size() == 1) return absl::OkStatus();
  ShmContext::Op op = MakeOp(desc, OpKind::kReduceScatter, name, count, type, -1);
  ctx.BeginOp(op);
  const int n = ctx.local_size(), me = ctx.local_rank();
  const size_t es = ElementSize(type);
  const ShardLayout lay(count, n, es, ctx.slot_bytes());
  const size_t piece_bytes = lay.piece() * es;
  char* base = static_cast<char*>(data);
  absl::InlinedVector<const void*, 16> in(static_cast<size_t>(n));
  for (size_t r = 0; r < lay.rounds(); ++r) {
    PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ctx.BeginStep(op));
    char* mine = ctx.Slot(me, s);
    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      const Range p = lay.piece(j, r);
      std::memcpy(mine + j * piece_bytes, base + p.begin * es, p.size() * es);
    }
    ctx.Publish(kCopied, s);
    PSYNC_RETURN_IF_ERROR(ctx.WaitAll(kCopied, s, op, "copy-in"));
    if (r == 0) PSYNC_RETURN_IF_ERROR(ctx.CheckAllDescriptors(op));
    const Range own = lay.piece(me, r);
    for (int q = 0; q < n; ++q) {
      in[static_cast<size_t>(q)] = q == me ? static_cast<const void*>(base + own.begin * es)
                                           : static_cast<const void*>(ctx.Slot(q, s) + me * piece_bytes);
    }
    SumInto(type, base + own.begin * es, nullptr, in.data(), n, own.size());
    ctx.Publish(kConsumed, s);
  }
  return absl::OkStatus();
}

}  // namespace psync::comm::shm
