// Deterministic parameter initialisation: the same seed gives bit-identical
// weights on every platform and device (values are drawn on the host with
// SplitMix64 and integer-to-float conversion only, then copied).
#pragma once

#include <cstdint>
#include <vector>

namespace psync::nn {

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and fully specified, so
// unlike std::uniform_real_distribution its output is the same everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 random bits: exact in float.
  float NextUnit() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
  // Uniform in [lo, hi).
  float Uniform(float lo, float hi) { return lo + (hi - lo) * NextUnit(); }

 private:
  uint64_t state_;
};

// `n` values from U(lo, hi).
std::vector<float> UniformValues(SplitMix64& rng, int64_t n, float lo, float hi);
// `n` values from N(mean, std) (Box-Muller in double from pairs of 53-bit
// uniforms, then rounded to float).
std::vector<float> NormalValues(SplitMix64& rng, int64_t n, float mean, float std);

// The seed of sub-module `index` of a module seeded with `seed` (MLP layer i
// uses DeriveSeed(seed, i)).
uint64_t DeriveSeed(uint64_t seed, uint64_t index);

}  // namespace psync::nn
