// In-place allreduce of a registered buffer (buffer_registry.h): every
// local rank's tensor lives in shared memory, so nothing is staged.
//   1. publish "my gradients are in place" (kCopied), wait for everyone;
//   2. sum shard `me` of every rank's buffer (local rank order) into my
//      buffer's shard `me` (kReduced);
//   3. copy every other rank's reduced shard out of its buffer into mine,
//      each as soon as that rank is done (kConsumed);
//   4. wait until every rank has copied mine, so the caller may write to
//      the buffer again (the next backward) once this returns.
// Each rank reads 1.5x and writes 1x the tensor (staged: about 2x and 2x),
// with three synchronisations per collective instead of three per slot.
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"
#include "worker/comm/shm/shard_layout.h"

namespace psync::comm::shm {

absl::StatusOr<uint64_t> ReduceOwnShardInPlace(ShmContext& ctx, ShmContext::Op& op, const std::vector<char*>& bases,
                                                size_t offset_bytes, size_t count, DType type, float scale) {
  const int n = ctx.local_size(), me = ctx.local_rank();
  op.d.aux = offset_bytes;
  ctx.BeginOp(op);
  PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ctx.BeginStep(op));
  ctx.Publish(kCopied, s);
  PSYNC_RETURN_IF_ERROR(ctx.WaitAll(kCopied, s, op, "data"));
  PSYNC_RETURN_IF_ERROR(ctx.CheckAllDescriptors(op));
  const size_t es = ElementSize(type);
  const Range own = ShardLayout(count, n, es, ctx.slot_bytes()).shard(me);
  absl::InlinedVector<const void*, 16> in(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) in[static_cast<size_t>(q)] = bases[static_cast<size_t>(q)] + offset_bytes + own.begin * es;
  SumInto(type, bases[static_cast<size_t>(me)] + offset_bytes + own.begin * es, nullptr, in.data(), n, own.size(),
          scale);
  ctx.Publish(kReduced, s);
  return s;
}

absl::Status AllreduceInPlace(ShmContext& ctx, const std::string& desc, const std::string& name,
                              const std::vector<char*>& bases, uint64_t buffer_id, size_t offset_bytes, size_t count,
                              DType type, float scale) {
  const int n = ctx.local_size(), me = ctx.local_rank();
  if (n == 1) return absl::OkStatus();
  ShmContext::Op op = MakeOp(desc, OpKind::kAllreduceInPlace, name, count, type, static_cast<int>(buffer_id));
  PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ReduceOwnShardInPlace(ctx, op, bases, offset_bytes, count, type, scale));
  const size_t es = ElementSize(type);
  const ShardLayout lay(count, n, es, ctx.slot_bytes());
  char* mine = bases[static_cast<size_t>(me)] + offset_bytes;
  for (int j = 0; j < n; ++j) {
    if (j == me) continue;
    PSYNC_RETURN_IF_ERROR(ctx.WaitPeer(j, kReduced, s, op, "reduced shard"));
    const Range p = lay.shard(j);
    std::memcpy(mine + p.begin * es, bases[static_cast<size_t>(j)] + offset_bytes + p.begin * es, p.size() * es);
  }
  ctx.Publish(kConsumed, s);
  return ctx.WaitAll(kConsumed, s, op, "copy of our reduced shard");
}

}  // namespace psync::comm::shm
