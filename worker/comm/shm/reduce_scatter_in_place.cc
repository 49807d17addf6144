// In-place reduce-scatter of a registered buffer (buffer_registry.h): every
// local rank's tensor lives in shared memory, so nothing is staged.
//   1. publish "my data is in place" (kCopied), wait for everyone;
//   2. sum shard `me` of every rank's buffer (local rank order) into my
//      buffer's shard `me`, times `scale` (kReduced);
//   3. wait until every rank has reduced its shard (read ours), so the
//      caller may write to the buffer again once this returns (kConsumed).
// Each rank reads 1x and writes 1/n of the tensor, two synchronisations:
// the first half of allreduce_in_place.cc.
#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::shm {

absl::Status ReduceScatterInPlace(ShmContext& ctx, const std::string& desc, const std::string& name,
                                  const std::vector<char*>& bases, uint64_t buffer_id, size_t offset_bytes,
                                  size_t count, DType type, float scale) {
  if (ctx.local_size() == 1) return absl::OkStatus();
  ShmContext::Op op = MakeOp(desc, OpKind::kReduceScatterInPlace, name, count, type, static_cast<int>(buffer_id));
  PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ReduceOwnShardInPlace(ctx, op, bases, offset_bytes, count, type, scale));
  PSYNC_RETURN_IF_ERROR(ctx.WaitAll(kReduced, s, op, "reduction of its shard"));
  ctx.Publish(kConsumed, s);
  return absl::OkStatus();
}

}  // namespace psync::comm::shm
