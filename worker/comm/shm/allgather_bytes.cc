// AllgatherBytes: every rank's byte string, of any length, to every rank.
// One step exchanges the lengths, then slot-sized chunks of every string.
#include <algorithm>
#include <cstring>

#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::shm {

absl::StatusOr<std::vector<std::string>> AllgatherBytes(ShmContext& ctx, const std::string& desc,
                                                        const std::string& mine) {
  const int n = ctx.local_size(), me = ctx.local_rank();
  std::vector<std::string> out(static_cast<size_t>(n));
  out[static_cast<size_t>(me)] = mine;
  if (n == 1) return out;
  ShmContext::Op op = MakeOp(desc, OpKind::kAllgatherBytes, "allgather", 0, kFloat32, -1);
  ctx.BeginOp(op);
  PSYNC_ASSIGN_OR_RETURN(uint64_t s, ctx.BeginStep(op));
  const uint64_t my_len = mine.size();
  std::memcpy(ctx.Slot(me, s), &my_len, sizeof(my_len));
  ctx.Publish(kCopied, s);
  PSYNC_RETURN_IF_ERROR(ctx.WaitAll(kCopied, s, op, "length"));
  PSYNC_RETURN_IF_ERROR(ctx.CheckAllDescriptors(op));
  std::vector<uint64_t> lens(static_cast<size_t>(n));
  uint64_t longest = 0;
  for (int q = 0; q < n; ++q) {
    std::memcpy(&lens[static_cast<size_t>(q)], ctx.Slot(q, s), sizeof(uint64_t));
    longest = std::max(longest, lens[static_cast<size_t>(q)]);
    if (q != me) out[static_cast<size_t>(q)].resize(lens[static_cast<size_t>(q)]);
  }
  ctx.Publish(kConsumed, s);
  const size_t chunk = ctx.slot_bytes();
  for (uint64_t off = 0; off < longest; off += chunk) {
    PSYNC_ASSIGN_OR_RETURN(s, ctx.BeginStep(op));
    if (off < my_len) std::memcpy(ctx.Slot(me, s), mine.data() + off, std::min<uint64_t>(chunk, my_len - off));
    ctx.Publish(kCopied, s);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      PSYNC_RETURN_IF_ERROR(ctx.WaitPeer(q, kCopied, s, op, "chunk"));
      const uint64_t len = lens[static_cast<size_t>(q)];
      if (off < len) std::memcpy(&out[static_cast<size_t>(q)][off], ctx.Slot(q, s), std::min<uint64_t>(chunk, len - off));
    }
    ctx.Publish(kConsumed, s);
  }
  return out;
}

}  // namespace psync::comm::shm
