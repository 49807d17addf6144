// Ring all-gather over Gloo's unbound buffers (see ring.h), in place: each
// step forwards the shard received in the previous one.
#include <gloo/types.h>

#include "worker/comm/flat_shard.h"
#include "worker/comm/gloo/ring.h"

namespace psync::comm::gloo_ring {

void Allgather(const std::shared_ptr<gloo::Context>& ctx, PeerWatch* watch, uint32_t tag,
               std::chrono::milliseconds timeout, void* data, size_t count, size_t elem_size) {
  const int n = ctx->size, me = ctx->rank;
  if (n == 1 || count == 0) return;
  const size_t es = elem_size;
  auto buf = ctx->createUnboundBuffer(data, count * es);
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  PeerWatch::Scope watched(watch, left, {buf.get()}, right, {buf.get()});
  const auto slot = gloo::Slot::build(kAllgatherSlotPrefix, tag);
  for (int i = 0; i < n - 1; ++i) {
    const ShardRange s = ShardOf(count, n, ((me - i) % n + n) % n, es);
    const ShardRange r = ShardOf(count, n, ((me - i - 1) % n + n) % n, es);
    if (!s.empty()) buf->send(right, slot, s.begin * es, s.size() * es);
    if (!r.empty()) buf->recv(left, slot, r.begin * es, r.size() * es);
    if (!s.empty()) watched.WaitSend(buf.get(), timeout, "all-gather send");
    if (!r.empty()) watched.WaitRecv(buf.get(), timeout, "all-gather receive");
  }
}

}  // namespace psync::comm::gloo_ring
