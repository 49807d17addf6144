#include "worker/comm/shm/buffer_registry.h"

#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::shm {

absl::StatusOr<void*> BufferRegistry::Register(ShmContext& ctx, const std::string& desc, size_t bytes) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> l(mu_);
    id = next_id_++;
  }
  const int n = ctx.local_size(), me = ctx.local_rank();
  // At least a page: a zero-byte mapping is not a mapping.
  const size_t mapped = std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096);
  ShmContext::Op op = MakeOp(desc, OpKind::kRegisterBuffer, "buffer", bytes, kFloat32, static_cast<int>(id));
  ctx.BeginOp(op);
  PSYNC_ASSIGN_OR_RETURN(const uint64_t s, ctx.BeginStep(op));
  const std::string suffix = absl::StrCat(".b", id);
  Entry e;
  e.id = id;
  PSYNC_ASSIGN_OR_RETURN(e.own, ShmSegment::Create(ctx.PeerSegmentName(me, suffix), mapped));
  ctx.Publish(kCopied, s);
  PSYNC_RETURN_IF_ERROR(ctx.WaitAll(kCopied, s, op, "buffer"));
  PSYNC_RETURN_IF_ERROR(ctx.CheckAllDescriptors(op));
  e.peers.resize(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    absl::StatusOr<ShmSegment> seg = ShmSegment::Open(ctx.PeerSegmentName(q, suffix), mapped);
    if (!seg.ok()) return Annotate(seg.status(), absl::StrCat(desc, ": mapping rank ", ctx.global_rank(q), "'s buffer"));
    e.peers[static_cast<size_t>(q)] = std::move(*seg);
  }
  ctx.Publish(kConsumed, s);
  // Why wait: a peer that has not opened our name yet would find nothing.
  PSYNC_RETURN_IF_ERROR(ctx.WaitAll(kConsumed, s, op, "mapping of our buffer"));
  e.own.Unlink();
  void* base = e.own.data();
  std::lock_guard<std::mutex> l(mu_);
  entries_.emplace(base, std::move(e));
  return base;
}

std::optional<BufferRegistry::View> BufferRegistry::Find(const void* base) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(base);
  if (it == entries_.end()) return std::nullopt;
  View v;
  v.id = it->second.id;
  for (size_t q = 0; q < it->second.peers.size(); ++q) {
    const ShmSegment& seg = it->second.peers[q];
    v.bases.push_back(static_cast<char*>(seg.data() ? seg.data() : it->second.own.data()));
  }
  return v;
}

void BufferRegistry::Release(const void* base) {
  Entry gone;  // unmapped outside the lock
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(base);
    if (it == entries_.end()) return;
    gone = std::move(it->second);
    entries_.erase(it);
  }
}

size_t BufferRegistry::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.size();
}

}  // namespace psync::comm::shm
