// The layout of one rank's workspace segment: a control block, then
// `slots` data slots of `slot_bytes` each. Every rank writes only its own
// segment; peers read it.
//
// Progress is told with monotonic step counters (no rotating states and no
// closing barrier): a rank publishes "I finished phase P of step s" by
// storing s into its counter P with release order, then rings its bell (a
// futex word) if anyone sleeps on it. A rank reuses slot s % slots only once
// every peer's kConsumed counter reached s - slots, i.e. everybody is done
// reading what it wrote there `slots` steps ago.
//
// The descriptor of each collective (kind, element count, root, name) is
// written at its first step, before that step's kCopied is published, so
// peers can check that every rank issued the same collective. A peer can be
// at most slots-1 collectives ahead of the slowest rank (it cannot start a
// step before everyone released the slot it reuses), so a ring of
// kDescriptorRing > slots entries never overwrites one still to be read.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace psync::comm::shm {

inline constexpr uint64_t kWorkspaceMagic = 0x31767370636e7370ULL;  // "psncpsv1"
inline constexpr uint32_t kWorkspaceVersion = 2;  // 2: a longer abort_reason
inline constexpr size_t kCacheLine = 64;

enum Counter : int {
  kCopied = 0,    // my contribution of step s is in my slot
  kReduced = 1,   // my reduced piece of step s is in my slot
  kConsumed = 2,  // I finished reading peers' slots of step s
  kNumCounters = 3,
};

inline constexpr int kDescriptorRing = 8;
inline constexpr int kMaxSlots = kDescriptorRing - 1;

enum class OpKind : uint32_t {
  kAllreduce = 1,
  kReduceScatter = 2,
  kAllgather = 3,
  kBroadcast = 4,
  kReduce = 5,
  kBarrier = 6,
  kAllgatherBytes = 7,
  kRegisterBuffer = 8,
  kAllreduceInPlace = 9,
  kReduceScatterInPlace = 10,
  kAllgatherInPlace = 11,
};
const char* OpKindName(OpKind kind);

struct OpDescriptor {
  uint64_t seq = 0;    // 0-based collective number in this group
  OpKind kind = OpKind::kBarrier;
  int32_t root = -1;   // local rank, for rooted collectives
  uint64_t count = 0;  // elements (bytes for byte collectives)
  uint32_t elem_type = 0;
  uint64_t aux = 0;    // registered buffers: byte offset of the tensor in its buffer
  char name[36] = {};  // truncated, NUL-terminated
};

struct alignas(kCacheLine) PaddedCounter {
  std::atomic<uint64_t> value{0};
};

struct ControlBlock {
  // ---- written once by the creator before the segment is published
  uint64_t magic = 0;
  uint32_t version = 0;
  int32_t rank = -1;  // global rank (for messages)
  uint64_t nonce = 0; // proves a peer mapped the segment we published
  int64_t pid = 0;
  uint64_t start_time = 0;
  uint64_t pid_ns = 0;
  uint64_t slot_bytes = 0;
  uint32_t slots = 0;
  // ---- wake-ups: bumped after every counter store; waiters count sleepers
  alignas(kCacheLine) std::atomic<uint32_t> bell{0};
  std::atomic<uint32_t> waiters{0};
  // ---- 0 healthy; 1 reason being written; 2 reason readable (first abort wins)
  alignas(kCacheLine) std::atomic<uint32_t> abort_state{0};
  // Room for a nested error (a hier group's reason quotes its Gloo
  // group's); a longer one keeps its head and tail (shm_context.cc).
  char abort_reason[1016] = {};
  // ---- bumped every ~100 ms when peers cannot watch our pid
  alignas(kCacheLine) std::atomic<uint64_t> heartbeat{0};
  PaddedCounter counters[kNumCounters];
  OpDescriptor descriptors[kDescriptorRing];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free (address-free)");

// Control block, rounded up to a page so slots start page-aligned.
inline constexpr size_t kControlBytes = (sizeof(ControlBlock) + 4095) / 4096 * 4096;

}  // namespace psync::comm::shm
