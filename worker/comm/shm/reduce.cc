// Reduce to a local root, in slot-sized chunks: the others copy a chunk into
// their slots; the root sums all of them (local rank order) into its tensor.
// The hierarchical allreduce uses it when hosts hold different numbers of
// ranks (no common shard layout across hosts).
#include <algorithm>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::shm {

absl::Status Reduce(ShmContext& ctx, const std::string& desc, const std::string& name, void* data, size_t count,
                    DType type, int root) {
  if (ctx.local_size() == 1) return absl::OkStatus();
  ShmContext::Op op = MakeOp(desc, OpKind::kReduce, name, count, type, root);
  ctx.BeginOp(op);
  const int n = ctx.local_size(), me = ctx.local_rank();
  const size_t es = ElementSize(type);
  const size_t chunk = ctx.slot_bytes() / es;
  const size_t rounds = std::max<size_t>(1, (count + chunk - 1) / chunk);
  char* base = static_cast<char*>(data);
  absl::InlinedVector<const void*, 16> in(static_cast<size_t>(n));
  for (size_t r = 0; r < rounds; ++r) {
    PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ctx.BeginStep(op));
    const size_t off = r * chunk, len = std::min(chunk, count - std::min(count, off));
    if (me != root && len > 0) std::memcpy(ctx.Slot(me, s), base + off * es, len * es);
    ctx.Publish(kCopied, s);
    if (me == root) {
      PSYNC_RETURN_IF_ERROR(ctx.WaitAll(kCopied, s, op, "chunk"));
      if (r == 0) PSYNC_RETURN_IF_ERROR(ctx.CheckAllDescriptors(op));
      for (int q = 0; q < n; ++q) {
        in[static_cast<size_t>(q)] = q == root ? static_cast<const void*>(base + off * es)
                                               : static_cast<const void*>(ctx.Slot(q, s));
      }
      SumInto(type, base + off * es, nullptr, in.data(), n, len);
    } else if (r == 0) {
      PSYNC_RETURN_IF_ERROR(ctx.WaitPeer(root, kCopied, s, op, "arrival"));
      PSYNC_RETURN_IF_ERROR(ctx.CheckDescriptor(root, op));
    }
    ctx.Publish(kConsumed, s);
  }
  return absl::OkStatus();
}

}  // namespace psync::comm::shm
