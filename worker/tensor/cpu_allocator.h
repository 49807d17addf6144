// CpuCachingAllocator: size-bucketed free lists of 64-byte-aligned CPU
// blocks, so the large tensors a training step allocates and frees every
// iteration reuse the same (already faulted-in) pages instead of going back
// to malloc/mmap each time (which page-faults every page again).
//
// * Size classes: requests are rounded up to a multiple of 64 bytes; above
//   64 KiB, up to the next 1/8 of a power of two (at most 12.5% slack), so
//   tensors of similar sizes share free lists. A block is returned to the
//   list of its class and handed out again for any request of that class.
// * Cap: at most `cache_limit()` bytes sit in the free lists (default
//   1 GiB; env PSYNC_CPU_CACHE_BYTES overrides, 0 turns caching off). A
//   freed block that would exceed it goes back to the system.
// * ReleaseCached() gives every cached block back to the system (blocks in
//   use are unaffected).
// * Thread-safe (one mutex; tensors are freed on communication threads too).
// * Under AddressSanitizer, cached blocks are poisoned, so a use after free
//   into a cached block is still reported.
//
// Storage uses it for all CPU memory. Contents of a reused block are
// whatever was there before (Tensor::Empty is uninitialised by contract).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace psync {

class CpuCachingAllocator {
 public:
  static constexpr size_t kAlignment = 64;

  struct Stats {
    uint64_t allocations = 0;   // Allocate calls
    uint64_t cache_hits = 0;    // served from a free list
    uint64_t system_allocs = 0; // went to aligned_alloc
    size_t cached_bytes = 0;    // sitting in free lists now
    size_t cached_blocks = 0;
    size_t in_use_bytes = 0;       // handed out and not freed yet (size classes)
    size_t peak_in_use_bytes = 0;  // the most in use at once since start or ResetPeak
  };

  // The process-wide allocator (never destroyed: storages may be freed
  // during static destruction).
  static CpuCachingAllocator& Get();

  // A 64-byte-aligned block of at least `nbytes` (a unique pointer also for
  // 0). Returns nullptr when the system is out of memory (after releasing
  // the cache and retrying).
  void* Allocate(size_t nbytes);
  // `nbytes` must be the size passed to the Allocate that returned `p`.
  void Free(void* p, size_t nbytes);

  // Frees every cached block to the system.
  void ReleaseCached();
  // Changes the cap (releasing cached blocks above it).
  void SetCacheLimit(size_t bytes);
  size_t cache_limit() const;
  Stats stats() const;
  // Starts a new peak at the bytes in use now (benchmarks measure a phase).
  void ResetPeak();

  // The size class (bytes actually allocated) of a request.
  static size_t RoundSize(size_t nbytes);

 private:
  CpuCachingAllocator();
  void TrimLocked(size_t limit, std::vector<void*>* to_free);

  mutable std::mutex mu_;
  size_t limit_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // class size -> blocks
  Stats stats_;
};

}  // namespace psync
