// CpuCachingAllocator: alignment, reuse of freed blocks, the cap, release.
#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "worker/tensor/cpu_allocator.h"
#include "psync/tensor/tensor.h"

namespace psync {
namespace {

TEST(CpuCachingAllocator, SizeClasses) {
  EXPECT_EQ(CpuCachingAllocator::RoundSize(0), 64u);
  EXPECT_EQ(CpuCachingAllocator::RoundSize(1), 64u);
  EXPECT_EQ(CpuCachingAllocator::RoundSize(64), 64u);
  EXPECT_EQ(CpuCachingAllocator::RoundSize(65), 128u);
  EXPECT_EQ(CpuCachingAllocator::RoundSize(64 << 10), size_t{64} << 10);
  // Above 64 KiB: eighths of a power of two.
  EXPECT_EQ(CpuCachingAllocator::RoundSize((64 << 10) + 1), size_t{72} << 10);
  EXPECT_EQ(CpuCachingAllocator::RoundSize(size_t{64} << 20), size_t{64} << 20);
  EXPECT_EQ(CpuCachingAllocator::RoundSize((size_t{64} << 20) + 1), size_t{72} << 20);
  for (size_t n : {size_t{100}, size_t{70000}, size_t{3} << 20, (size_t{5} << 20) + 3}) {
    const size_t r = CpuCachingAllocator::RoundSize(n);
    EXPECT_GE(r, n);
    EXPECT_LE(r, n + n / 8 + 64);
    EXPECT_EQ(r % 64, 0u);
  }
}

TEST(CpuCachingAllocator, ReusesFreedBlocksAndReleases) {
  CpuCachingAllocator& a = CpuCachingAllocator::Get();
  a.ReleaseCached();
  const size_t n = (size_t{3} << 20) + 12;
  void* p = a.Allocate(n);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  a.Free(p, n);
  EXPECT_GE(a.stats().cached_bytes, n);
  const auto hits = a.stats().cache_hits;
  void* q = a.Allocate(n - 5);  // same class
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.stats().cache_hits, hits + 1);
  a.Free(q, n - 5);
  a.ReleaseCached();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  EXPECT_EQ(a.stats().cached_blocks, 0u);
}

TEST(CpuCachingAllocator, CountsBytesInUseAndThePeak) {
  CpuCachingAllocator& a = CpuCachingAllocator::Get();
  const size_t base = a.stats().in_use_bytes, n = size_t{5} << 20, m = 1000;
  a.ResetPeak();
  EXPECT_EQ(a.stats().peak_in_use_bytes, base);
  void* p = a.Allocate(n);
  void* q = a.Allocate(m);
  const size_t both = CpuCachingAllocator::RoundSize(n) + CpuCachingAllocator::RoundSize(m);
  EXPECT_EQ(a.stats().in_use_bytes, base + both);
  a.Free(p, n);
  EXPECT_EQ(a.stats().in_use_bytes, base + CpuCachingAllocator::RoundSize(m));
  EXPECT_EQ(a.stats().peak_in_use_bytes, base + both);  // freed blocks are cached, not in use
  a.Free(q, m);
  EXPECT_EQ(a.stats().in_use_bytes, base);
  a.ResetPeak();
  EXPECT_EQ(a.stats().peak_in_use_bytes, base);
}

TEST(CpuCachingAllocator, CapSendsBlocksBackToTheSystem) {
  CpuCachingAllocator& a = CpuCachingAllocator::Get();
  const size_t old = a.cache_limit();
  a.ReleaseCached();
  a.SetCacheLimit(1 << 20);
  void* big = a.Allocate(size_t{2} << 20);
  void* small = a.Allocate(1000);
  a.Free(big, size_t{2} << 20);  // over the cap: not cached
  a.Free(small, 1000);
  EXPECT_EQ(a.stats().cached_bytes, CpuCachingAllocator::RoundSize(1000));
  a.SetCacheLimit(0);  // trims
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  a.SetCacheLimit(old);
}

TEST(CpuCachingAllocator, ThreadsAndTensors) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) {
        Tensor x = Tensor::Full({static_cast<int64_t>(1 + (i * 37 + t) % 5000)}, static_cast<float>(t));
        ASSERT_EQ(reinterpret_cast<uintptr_t>(x.raw_data()) % 64, 0u);
        for (float v : x.ToVector()) ASSERT_EQ(v, static_cast<float>(t));
      }
    });
  }
  for (auto& th : threads) th.join();
  // Zeros on a reused (dirty) block is still zero.
  { Tensor dirty = Tensor::Full({4096}, 7.0f); }
  Tensor z = Tensor::Zeros({4096});
  for (float v : z.ToVector()) ASSERT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace psync
