#include "worker/tensor/cpu_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#define PSYNC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PSYNC_ASAN 1
#endif
#endif
#ifdef PSYNC_ASAN
#include <sanitizer/asan_interface.h>
#define PSYNC_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define PSYNC_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define PSYNC_POISON(p, n) ((void)(p), (void)(n))
#define PSYNC_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace psync {

namespace {
constexpr size_t kDefaultLimit = size_t{1} << 30;  // 1 GiB
constexpr size_t kFineClassMax = size_t{64} << 10; // 64-byte classes up to 64 KiB

size_t LimitFromEnv() {
  const char* v = std::getenv("PSYNC_CPU_CACHE_BYTES");
  if (v == nullptr || *v == '\0') return kDefaultLimit;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  return (end != nullptr && *end == '\0') ? static_cast<size_t>(n) : kDefaultLimit;
}
}  // namespace

size_t CpuCachingAllocator::RoundSize(size_t nbytes) {
  if (nbytes == 0) return kAlignment;
  size_t r = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (r <= kFineClassMax) return r;
  // Eight classes per power of two: step = 2^floor(log2 r) / 8.
  const int msb = 63 - __builtin_clzll(static_cast<unsigned long long>(r));
  const size_t step = size_t{1} << (msb - 3);
  return (r + step - 1) / step * step;
}

CpuCachingAllocator& CpuCachingAllocator::Get() {
  static CpuCachingAllocator* a = new CpuCachingAllocator();  // never destroyed
  return *a;
}

CpuCachingAllocator::CpuCachingAllocator() : limit_(LimitFromEnv()) {}

void* CpuCachingAllocator::Allocate(size_t nbytes) {
  const size_t size = RoundSize(nbytes);
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.allocations;
    stats_.in_use_bytes += size;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= size;
      --stats_.cached_blocks;
      ++stats_.cache_hits;
      PSYNC_UNPOISON(p, size);
      return p;
    }
    ++stats_.system_allocs;
  }
  void* p = std::aligned_alloc(kAlignment, size);
  if (p == nullptr) {
    ReleaseCached();
    p = std::aligned_alloc(kAlignment, size);
  }
  if (p == nullptr) {
    std::lock_guard<std::mutex> l(mu_);
    stats_.in_use_bytes -= size;
  }
  return p;
}

void CpuCachingAllocator::Free(void* p, size_t nbytes) {
  if (p == nullptr) return;
  const size_t size = RoundSize(nbytes);
  {
    std::lock_guard<std::mutex> l(mu_);
    stats_.in_use_bytes -= size;
    if (stats_.cached_bytes + size <= limit_) {
      PSYNC_POISON(p, size);
      free_[size].push_back(p);
      stats_.cached_bytes += size;
      ++stats_.cached_blocks;
      return;
    }
  }
  std::free(p);
}

void CpuCachingAllocator::TrimLocked(size_t limit, std::vector<void*>* to_free) {
  for (auto it = free_.begin(); it != free_.end() && stats_.cached_bytes > limit;) {
    std::vector<void*>& blocks = it->second;
    while (!blocks.empty() && stats_.cached_bytes > limit) {
      void* p = blocks.back();
      blocks.pop_back();
      PSYNC_UNPOISON(p, it->first);
      to_free->push_back(p);
      stats_.cached_bytes -= it->first;
      --stats_.cached_blocks;
    }
    it = blocks.empty() ? free_.erase(it) : std::next(it);
  }
}

void CpuCachingAllocator::ReleaseCached() {
  std::vector<void*> to_free;
  {
    std::lock_guard<std::mutex> l(mu_);
    TrimLocked(0, &to_free);
    free_.clear();
  }
  for (void* p : to_free) std::free(p);
}

void CpuCachingAllocator::SetCacheLimit(size_t bytes) {
  std::vector<void*> to_free;
  {
    std::lock_guard<std::mutex> l(mu_);
    limit_ = bytes;
    TrimLocked(bytes, &to_free);
  }
  for (void* p : to_free) std::free(p);
}

size_t CpuCachingAllocator::cache_limit() const {
  std::lock_guard<std::mutex> l(mu_);
  return limit_;
}

CpuCachingAllocator::Stats CpuCachingAllocator::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void CpuCachingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> l(mu_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
}

}  // namespace psync
