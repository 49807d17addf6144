// BFloat16 and Float16: 16-bit floating-point storage types for the host.
//
// Bit layouts are the standard ones (bfloat16 = the top half of an IEEE
// float32; float16 = IEEE binary16), identical to CUDA's __nv_bfloat16 and
// __half, so buffers move between host and device unchanged. Conversions
// from float round to nearest, ties to even (as PyTorch and CUDA do); NaN
// stays NaN. There is no arithmetic: compute in float and convert.
#pragma once

#include <cstdint>
#include <cstring>

namespace psync {

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  explicit BFloat16(float f) : bits(FromFloat(f)) {}
  explicit operator float() const { return ToFloat(bits); }

  static uint16_t FromFloat(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // ties to even
    return static_cast<uint16_t>((u + rounding) >> 16);
  }
  static float ToFloat(uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
};

struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  explicit Float16(float f) : bits(FromFloat(f)) {}
  explicit operator float() const { return ToFloat(bits); }

  static uint16_t FromFloat(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (abs < 0x38800000u) {
      // Subnormal (or zero) half: value = m * 2^-24. Shift the 24-bit
      // significand into place and round to nearest even.
      if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
      const uint32_t exp = abs >> 23;
      const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
      const uint32_t shift = 126 - exp;  // 14..24 (exp 102..112)
      uint32_t half = mant >> shift;
      const uint32_t rem = mant & ((1u << shift) - 1);
      const uint32_t mid = 1u << (shift - 1);
      if (rem > mid || (rem == mid && (half & 1u))) ++half;
      return static_cast<uint16_t>(sign | half);
    }
    // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits.
    uint32_t h = ((abs >> 13) - (112u << 10));
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: still right
    return static_cast<uint16_t>(sign | h);
  }
  static float ToFloat(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
      u = sign | 0x7f800000u | (mant << 13);  // inf / NaN
    } else if (exp != 0) {
      u = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
      u = sign;
    } else {
      // Subnormal half: normalise.
      uint32_t m = mant;
      int e = -1;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      u = sign | ((112u - static_cast<uint32_t>(e)) << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2, "16-bit storage types");

}  // namespace psync
