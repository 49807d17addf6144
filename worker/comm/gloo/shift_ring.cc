// Ring shift over Gloo's unbound buffers (see ring.h): one send to the
// rank `distance` ahead and one receive from the rank as far behind, in
// flight together (so every rank's pair completes without an order).
#include <gloo/types.h>

#include "worker/comm/gloo/ring.h"

namespace psync::comm::gloo_ring {

void Shift(const std::shared_ptr<gloo::Context>& ctx, PeerWatch* watch, uint32_t tag,
           std::chrono::milliseconds timeout, const void* send, void* recv, size_t bytes, int to, int from) {
  if (bytes == 0) return;
  // Gloo's buffers are not const: the send buffer is only read.
  auto out = ctx->createUnboundBuffer(const_cast<void*>(send), bytes);
  auto in = ctx->createUnboundBuffer(recv, bytes);
  PeerWatch::Scope watched(watch, from, {in.get()}, to, {out.get()});
  const auto slot = gloo::Slot::build(kShiftSlotPrefix, tag);
  out->send(to, slot);
  in->recv(from, slot);
  watched.WaitSend(out.get(), timeout, "shift send");
  watched.WaitRecv(in.get(), timeout, "shift receive");
}

}  // namespace psync::comm::gloo_ring
