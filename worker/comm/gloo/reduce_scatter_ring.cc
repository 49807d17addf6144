// Ring reduce-scatter over Gloo's unbound buffers (see ring.h). Each step
// sends one shard to the right neighbour and receives one from the left
// into a scratch shard, then adds it in; every rank moves (n-1)/n of the
// buffer each way, as the first half of a ring allreduce does.
#include <gloo/types.h>

#include <vector>

#include "worker/comm/flat_shard.h"
#include "worker/comm/gloo/ring.h"
#include "psync/tensor/half.h"

namespace psync::comm::gloo_ring {
namespace {

template <typename Half>
void AddHalf(uint16_t* acc, const uint16_t* in, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Half::FromFloat(Half::ToFloat(acc[i]) + Half::ToFloat(in[i]));
}

void Add(DType type, void* acc, const void* in, size_t n) {
  if (type == kFloat32) {
    float* a = static_cast<float*>(acc);
    const float* b = static_cast<const float*>(in);
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + a[i];
  } else if (type == kBFloat16) {
    AddHalf<BFloat16>(static_cast<uint16_t*>(acc), static_cast<const uint16_t*>(in), n);
  } else {
    AddHalf<Float16>(static_cast<uint16_t*>(acc), static_cast<const uint16_t*>(in), n);
  }
}

}  // namespace

void ReduceScatter(const std::shared_ptr<gloo::Context>& ctx, PeerWatch* watch, uint32_t tag,
                   std::chrono::milliseconds timeout, void* data, size_t count, DType type) {
  const int n = ctx->size, me = ctx->rank;
  if (n == 1 || count == 0) return;
  const size_t es = ElementSize(type);
  std::vector<char> scratch(ShardSize(count, n, es) * es);
  auto buf = ctx->createUnboundBuffer(data, count * es);
  auto in = ctx->createUnboundBuffer(scratch.data(), scratch.size());
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  PeerWatch::Scope watched(watch, left, {in.get()}, right, {buf.get()});
  const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  char* base = static_cast<char*>(data);
  for (int i = 0; i < n - 1; ++i) {
    const ShardRange s = ShardOf(count, n, ((me - i - 1) % n + n) % n, es);
    const ShardRange r = ShardOf(count, n, ((me - i - 2) % n + 2 * n) % n, es);
    // Empty shards (the tail of a short buffer) move nothing on either side.
    if (!s.empty()) buf->send(right, slot, s.begin * es, s.size() * es);
    if (!r.empty()) in->recv(left, slot, 0, r.size() * es);
    if (!s.empty()) watched.WaitSend(buf.get(), timeout, "reduce-scatter send");
    if (!r.empty()) {
      watched.WaitRecv(in.get(), timeout, "reduce-scatter receive");
      Add(type, base + r.begin * es, scratch.data(), r.size());
    }
  }
}

}  // namespace psync::comm::gloo_ring
