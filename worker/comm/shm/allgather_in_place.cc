// In-place all-gather of a registered buffer (buffer_registry.h):
//   1. publish "my shard is in place" (kCopied);
//   2. copy every other rank's shard out of its buffer into mine, each as
//      soon as that rank published (kConsumed);
//   3. wait until every rank has copied mine, so the caller may write its
//      shard again once this returns.
// Each rank reads and writes (n-1)/n of the tensor, two synchronisations.
#include <cstring>

#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"
#include "worker/comm/shm/shard_layout.h"

namespace psync::comm::shm {

absl::Status AllgatherInPlace(ShmContext& ctx, const std::string& desc, const std::string& name,
                              const std::vector<char*>& bases, uint64_t buffer_id, size_t offset_bytes, size_t count,
                              DType type) {
  const int n = ctx.local_size(), me = ctx.local_rank();
  if (n == 1) return absl::OkStatus();
  ShmContext::Op op = MakeOp(desc, OpKind::kAllgatherInPlace, name, count, type, static_cast<int>(buffer_id));
  op.d.aux = offset_bytes;
  ctx.BeginOp(op);
  PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ctx.BeginStep(op));
  ctx.Publish(kCopied, s);
  const size_t es = ElementSize(type);
  const ShardLayout lay(count, n, es, ctx.slot_bytes());
  char* mine = bases[static_cast<size_t>(me)] + offset_bytes;
  for (int j = 0; j < n; ++j) {
    if (j == me) continue;
    PSYNC_RETURN_IF_ERROR(ctx.WaitPeer(j, kCopied, s, op, "shard"));
    PSYNC_RETURN_IF_ERROR(ctx.CheckDescriptor(j, op));
    const Range p = lay.shard(j);
    std::memcpy(mine + p.begin * es, bases[static_cast<size_t>(j)] + offset_bytes + p.begin * es, p.size() * es);
  }
  ctx.Publish(kConsumed, s);
  return ctx.WaitAll(kConsumed, s, op, "copy of our shard");
}

}  // namespace psync::comm::shm
