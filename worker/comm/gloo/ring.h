// Ring collectives of a flat buffer over Gloo's transport (unbound buffers),
// one algorithm per file, for GlooGroup's reduce-scatter, all-gather and shift:
// shards follow comm/flat_shard.h (uneven and empty ones included), which
// Gloo's own algorithms (equal counts only) do not. They run on the calling
// thread (GlooGroup's communication thread) and report errors as Gloo does,
// by throwing gloo::IoException (a peer lost, a timeout), which the group
// turns into a Status. A PeerWatch (peer_watch.h; may be null) wakes their
// waits on a peer whose connection is lost.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <gloo/context.h>

#include "psync/tensor/dtype.h"
#include "worker/comm/gloo/peer_watch.h"

namespace psync::comm::gloo_ring {

// Slot prefixes of these algorithms (Gloo's own use 0x01..0x08).
inline constexpr uint8_t kReduceScatterSlotPrefix = 0x50;
inline constexpr uint8_t kAllgatherSlotPrefix = 0x51;
inline constexpr uint8_t kShiftSlotPrefix = 0x52;
inline constexpr uint8_t kProbeSlotPrefix = 0x53;  // PeerWatch's: nothing is ever sent on it

// n-1 steps: at step i rank r sends its partial sum of shard (r-i-1) to
// rank r+1 and adds what rank r-1 sends of shard (r-i-2) into its own; so
// shard r ends on rank r, summed in the fixed ring order (x[r+1] + ... ) +
// x[r]. float32, bfloat16, float16 (16-bit: each add in float, rounded).
void ReduceScatter(const std::shared_ptr<gloo::Context>& ctx, PeerWatch* watch, uint32_t tag,
                   std::chrono::milliseconds timeout, void* data, size_t count, DType type);

// n-1 steps: at step i rank r sends shard (r-i) to rank r+1 and receives
// shard (r-i-1) from rank r-1, in place. Any element type.
void Allgather(const std::shared_ptr<gloo::Context>& ctx, PeerWatch* watch, uint32_t tag,
               std::chrono::milliseconds timeout, void* data, size_t count, size_t elem_size);

// One step: `send` (bytes) to rank `to`, `recv` (as many) from rank
// `from` (ProcessGroup::Shift), concurrently.
void Shift(const std::shared_ptr<gloo::Context>& ctx, PeerWatch* watch, uint32_t tag,
           std::chrono::milliseconds timeout, const void* send, void* recv, size_t bytes, int to, int from);

}  // namespace psync::comm::gloo_ring
