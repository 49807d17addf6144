#include "worker/nn/init.h"

#include <cstddef>

namespace psync::nn {

std::vector<float> UniformValues(SplitMix64& rng, int64_t n, float lo, float hi) {
  std::vector<float> out(static_cast<size_t>(n));
  for (float& v : out) v = rng.Uniform(lo, hi);
  return out;
}

uint64_t DeriveSeed(uint64_t seed, uint64_t index) {
  // One SplitMix64 step over a mix of both: nearby (seed, index) pairs give
  // unrelated streams.
  SplitMix64 mix(seed ^ (0xD1B54A32D192ED03ULL * (index + 1)));
  return mix.Next();
}

}  // namespace psync::nn
