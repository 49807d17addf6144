// Allreduce: picks the symmetric (small) or sharded (large) algorithm;
// MakeOp builds the descriptor every collective starts with.
#include <cstring>

#include "worker/comm/shm/collectives.h"

namespace psync::comm::shm {

ShmContext::Op MakeOp(const std::string& desc, OpKind kind, const std::string& name, size_t count, DType type,
                      int root) {
  ShmContext::Op op;
  op.desc = desc;
  op.d.kind = kind;
  op.d.count = count;
  op.d.elem_type = static_cast<uint32_t>(type);
  op.d.root = root;
  std::strncpy(op.d.name, name.c_str(), sizeof(op.d.name) - 1);
  return op;
}

absl::Status Allreduce(ShmContext& ctx, const std::string& desc, const std::string& name, void* data, size_t count,
                       DType type, float scale) {
  if (ctx.local_size() == 1) return absl::OkStatus();
  ShmContext::Op op = MakeOp(desc, OpKind::kAllreduce, name, count, type, -1);
  ctx.BeginOp(op);
  const size_t bytes = count * ElementSize(type);
  // Why two algorithms: below a few KiB the cost is the synchronisation
  // (one step instead of three phases); above it, memory traffic (each rank
  // reads only its shard of the others instead of everything).
  if (bytes <= ctx.options().small_bytes && bytes <= ctx.slot_bytes()) {
    return AllreduceSymmetric(ctx, op, data, count, type, scale);
  }
  return AllreduceSharded(ctx, op, data, count, type, scale);
}

}  // namespace psync::comm::shm
