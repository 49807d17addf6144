// Which example (row or image) each slot of a step holds, for the example
// datasets (rows, synthetic, idx). With N examples and global batch B:
//
//   slot k of step s is global example g = s*B + k; epoch e = g / N,
//   position p = g mod N
//   unshuffled (default): example p        (today's rows contract:
//                                           row (s*B + k) mod N)
//   --shuffle:            example perm_e[p]
//
// perm_e is a Fisher-Yates shuffle of 0..N-1 driven by
// SplitMix64(seed * 0x2545F4914F6CDD1D + (e + 1) * 0xD1B54A32D192ED03)
// (mod 2^64): for i = N-1 down to 1, j = (next() * (i + 1)) >> 64 (the high
// 64 bits of the 128-bit product), swap(perm[i], perm[j]). It depends only
// on (seed, epoch, N), so every rank computes the same permutation and N
// ranks still see exactly the examples of one process.
//
// Threads: immutable after construction except the permutation cache,
// which its own mutex guards; Slots() may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "worker/data/dataset.h"

namespace psync::data {

class ExampleOrder {
 public:
  ExampleOrder(int64_t num_examples, bool shuffle, uint64_t seed);

  int64_t num_examples() const { return n_; }
  bool shuffle() const { return shuffle_; }

  // The example indices of the micro-batch `spec` names, in slot order.
  // `spec` must be valid (ValidateBatchSpec).
  std::vector<int64_t> MicroBatch(const BatchSpec& spec) const;

  // perm_e as defined above.
  static std::vector<int64_t> Permutation(int64_t n, uint64_t seed, uint64_t epoch);

 private:
  std::shared_ptr<const std::vector<int64_t>> PermutationCached(uint64_t epoch) const;

  const int64_t n_;
  const bool shuffle_;
  const uint64_t seed_;
  mutable std::mutex mu_;
  // The last two epochs' permutations (a step may straddle two); guarded by mu_.
  mutable std::vector<std::pair<uint64_t, std::shared_ptr<const std::vector<int64_t>>>> cache_;
};

}  // namespace psync::data
