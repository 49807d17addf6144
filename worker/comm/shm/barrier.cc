// Barrier: one step in which every rank publishes kCopied and waits for all.
#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::shm {

absl::Status Barrier(ShmContext& ctx, const std::string& desc) {
  if (ctx.local_size() == 1) return absl::OkStatus();
  ShmContext::Op op = MakeOp(desc, OpKind::kBarrier, "barrier", 0, kFloat32, -1);
  ctx.BeginOp(op);
  PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ctx.BeginStep(op));
  ctx.Publish(kCopied, s);
  PSYNC_RETURN_IF_ERROR(ctx.WaitAll(kCopied, s, op, "arrival"));
  PSYNC_RETURN_IF_ERROR(ctx.CheckAllDescriptors(op));
  ctx.Publish(kConsumed, s);
  return absl::OkStatus();
}

}  // namespace psync::comm::shm
