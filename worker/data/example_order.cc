#include "worker/data/example_order.h"

#include <numeric>

#include "absl/numeric/int128.h"
#include "worker/data/batch_geometry.h"
#include "psync/nn/init.h"  // SplitMix64 (header-only; psync_data does not link psync_nn)

namespace psync::data {

ExampleOrder::ExampleOrder(int64_t num_examples, bool shuffle, uint64_t seed)
    : n_(num_examples), shuffle_(shuffle), seed_(seed) {}

std::vector<int64_t> ExampleOrder::Permutation(int64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  nn::SplitMix64 rng(seed * 0x2545F4914F6CDD1DULL + (epoch + 1) * 0xD1B54A32D192ED03ULL);
  for (int64_t i = n - 1; i >= 1; --i) {
    const absl::uint128 product = absl::uint128(rng.Next()) * absl::uint128(static_cast<uint64_t>(i + 1));
    const int64_t j = static_cast<int64_t>(absl::Uint128High64(product));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

std::shared_ptr<const std::vector<int64_t>> ExampleOrder::PermutationCached(uint64_t epoch) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [e, perm] : cache_) {
      if (e == epoch) return perm;
    }
  }
  // Computed outside the lock: two threads may both compute it (same result).
  auto perm = std::make_shared<const std::vector<int64_t>>(Permutation(n_, seed_, epoch));
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.size() >= 2) cache_.erase(cache_.begin());
  cache_.emplace_back(epoch, perm);
  return perm;
}

std::vector<int64_t> ExampleOrder::MicroBatch(const BatchSpec& spec) const {
  const int64_t count = MicroBatchSize(spec);
  std::vector<int64_t> out(static_cast<size_t>(count));
  // g = s*B + k in 128 bits: no overflow for any step.
  const absl::uint128 first =
      absl::uint128(static_cast<uint64_t>(spec.step)) * static_cast<uint64_t>(spec.global_batch) +
      static_cast<uint64_t>(FirstSlot(spec));
  const uint64_t n = static_cast<uint64_t>(n_);
  uint64_t epoch = static_cast<uint64_t>(first / n);
  int64_t pos = static_cast<int64_t>(static_cast<uint64_t>(first % n));
  std::shared_ptr<const std::vector<int64_t>> perm;
  if (shuffle_) perm = PermutationCached(epoch);
  for (int64_t i = 0; i < count; ++i) {
    out[i] = shuffle_ ? (*perm)[pos] : pos;
    if (++pos == n_) {
      pos = 0;
      ++epoch;
      if (shuffle_) perm = PermutationCached(epoch);
    }
  }
  return out;
}

}  // namespace psync::data
