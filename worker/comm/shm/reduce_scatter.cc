// Reduce-scatter (the first half of the sharded allreduce): afterwards this
// rank's shard of the tensor holds the sum of everyone's shard (times
// `scale`, in the same pass). The
// hierarchical allreduce runs this, then the cross-host allreduce of the
// shard, then Allgather.
#include "worker/comm/shm/collectives.h"

namespace psync::comm::shm {

absl::Status ReduceScatter(ShmContext& ctx, const std::string& desc, const std::string& name, void* data,
                           size_t count, DType type, float scale) {
  if (ctx.local_size() == 1) {
    if (scale != 1.0f) SumInto(type, data, nullptr, &data, 1, count, scale);
    return absl::OkStatus();
  }
  ShmContext::Op op = MakeOp(desc, OpKind::kReduceScatter, name, count, type, -1);
  ctx.BeginOp(op);
  return ShardedSteps(ctx, op, data, count, type, scale, /*gather=*/false);
}

}  // namespace psync::comm::shm
