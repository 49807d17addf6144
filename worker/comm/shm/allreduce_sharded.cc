// Sharded allreduce (reduce-scatter + all-gather, fused per step): local
// rank j owns shard j of the tensor. Per step, every rank
//   1. copies its piece of every *other* shard into its slot (kCopied),
//   2. sums piece j of everyone (its own straight from its tensor, the
//      others' from their slots, in local rank order) into its tensor and
//      its slot (kReduced),
//   3. copies every other rank's reduced piece out of that rank's slot
//      (kConsumed).
// Each rank moves about 2x the tensor's bytes however many ranks there are.
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"
#include "worker/comm/shm/shard_layout.h"

namespace psync::comm::shm {

absl::Status AllreduceSharded(ShmContext& ctx, ShmContext::Op& op, void* data, size_t count, DType type, float scale) {
  return ShardedSteps(ctx, op, data, count, type, scale, /*gather=*/true);
}

absl::Status ShardedSteps(ShmContext& ctx, ShmContext::Op& op, void* data, size_t count, DType type, float scale,
                          bool gather) {
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
    // The allreduce also leaves the sum in its slot for the peers to gather.
    SumInto(type, base + own.begin * es, gather ? mine + me * piece_bytes : nullptr, in.data(), n, own.size(),
            scale);
    if (gather) {
      ctx.Publish(kReduced, s);
      // Gather each peer's piece as soon as that peer is done (no barrier).
      for (int j = 0; j < n; ++j) {
        if (j == me) continue;
        PSYNC_RETURN_IF_ERROR(ctx.WaitPeer(j, kReduced, s, op, "reduced shard"));
        const Range p = lay.piece(j, r);
        std::memcpy(base + p.begin * es, ctx.Slot(j, s) + j * piece_bytes, p.size() * es);
      }
    }
    ctx.Publish(kConsumed, s);
  }
  return absl::OkStatus();
}

}  // namespace psync::comm::shm
