// Symmetric allreduce for small tensors, one step: every rank copies its
// tensor into its slot, waits for all copies, and sums all of them (in local
// rank order) into its own tensor. No second synchronisation: the slot is
// reused only after every peer published kConsumed for this step.
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::shm {

absl::Status AllreduceSymmetric(ShmContext& ctx, ShmContext::Op& op, void* data, size_t count, DType type,
                                float scale) {
  const int n = ctx.local_size(), me = ctx.local_rank();
  PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ctx.BeginStep(op));
  if (count > 0) std::memcpy(ctx.Slot(me, s), data, count * ElementSize(type));
  ctx.Publish(kCopied, s);
  PSYNC_RETURN_IF_ERROR(ctx.WaitAll(kCopied, s, op, "copy-in"));
  PSYNC_RETURN_IF_ERROR(ctx.CheckAllDescriptors(op));
  absl::InlinedVector<const void*, 16> in(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) in[static_cast<size_t>(q)] = q == me ? data : ctx.Slot(q, s);
  SumInto(type, data, nullptr, in.data(), n, count, scale);
  ctx.Publish(kConsumed, s);
  return absl::OkStatus();
}

}  // namespace psync::comm::shm
