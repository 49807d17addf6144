#include "psync/nn/init.h"

#include <cmath>
#include <cstddef>

namespace psync::nn {

std::vector<float> UniformValues(SplitMix64& rng, int64_t n, float lo, float hi) {
  std::vector<float> out(static_cast<size_t>(n));
  for (float& v : out) v = rng.Uniform(lo, hi);
  return out;
}

std::vector<float> NormalValues(SplitMix64& rng, int64_t n, float mean, float std) {
  std::vector<float> out(static_cast<size_t>(n));
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (size_t i = 0; i < out.size(); i += 2) {
    // u1 in (0, 1], so log(u1) is finite.
    const double u1 = (static_cast<double>(rng.Next() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    const double u2 = static_cast<double>(rng.Next() >> 11) * (1.0 / 9007199254740992.0);
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(mean + std * r * std::cos(kTwoPi * u2));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(mean + std * r * std::sin(kTwoPi * u2));
  }
  return out;
}

uint64_t DeriveSeed(uint64_t seed, uint64_t index) {
  // One SplitMix64 step over a mix of both: nearby (seed, index) pairs give
  // unrelated streams.
  SplitMix64 mix(seed ^ (0xD1B54A32D192ED03ULL * (index + 1)));
  return mix.Next();
}

}  // namespace psync::nn
