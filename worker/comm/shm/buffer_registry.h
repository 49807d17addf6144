// BufferRegistry: a shm group's collective buffers (ProcessGroup::
// NewCollectiveBuffer), each one segment per local rank, mapped by all of
// them, so an allreduce reads the peers' gradients where they were written
// (allreduce_in_place.cc) instead of staging them through the workspace.
//
// Registration is a collective (a step of the context's protocol, run on the
// group's communication thread): every rank creates its segment
// "<workspace name>.b<id>", waits until all have, maps every peer's, waits
// until all have mapped, and unlinks its own name (nothing stays in
// /dev/shm). Buffer ids count registrations, so they agree on every rank.
//
// Release: when the last tensor over a buffer goes away (its Storage's
// release callback, any thread), this rank unmaps its own segment and its
// mappings of the peers' segments with the same id. Safe without talking to
// the peers: an in-place allreduce holds the tensor until it returns, and
// it returns only after every peer finished reading this rank's buffer
// (and this rank finished reading theirs).
//
// Threads: all members are guarded by mu_.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/shm/segment.h"
#include "worker/comm/shm/shm_context.h"

namespace psync::comm::shm {

class BufferRegistry {
 public:
  // The collective registration of a `bytes`-byte buffer; returns the base
  // of this rank's (zero-filled) mapping. Communication thread only.
  absl::StatusOr<void*> Register(ShmContext& ctx, const std::string& desc, size_t bytes);

  struct View {
    uint64_t id = 0;
    std::vector<char*> bases;  // every local rank's mapping of the buffer, by local rank
  };
  // The buffer whose mapping on this rank starts at `base`, if registered.
  std::optional<View> Find(const void* base) const;
  // Unmaps the buffer at `base` (own and peers' mappings). Any thread.
  void Release(const void* base);
  size_t size() const;

 private:
  struct Entry {
    uint64_t id = 0;
    ShmSegment own;
    std::vector<ShmSegment> peers;  // by local rank; own index empty
  };
  mutable std::mutex mu_;
  std::map<const void*, Entry> entries_;
  uint64_t next_id_ = 0;
};

}  // namespace psync::comm::shm
