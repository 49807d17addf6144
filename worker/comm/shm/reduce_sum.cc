#include "worker/comm/shm/reduce_sum.h"

#include <cmath>
#include <cstring>

namespace psync::comm::shm {
namespace {

typedef float V16 __attribute__((vector_size(64)));

// Why target_clones: the binary stays portable (x86-64 baseline) while the
// hot loop runs with AVX-512 or AVX2 where the CPU has them.
__attribute__((target_clones("avx512f", "avx2", "default"))) void SumF32(float* out, float* out2,
                                                                          const float* const* in, int n,
                                                                          size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    V16 acc;
    std::memcpy(&acc, in[0] + i, sizeof(acc));
    for (int k = 1; k < n; ++k) {
      V16 x;
      std::memcpy(&x, in[k] + i, sizeof(x));
      acc += x;
    }
    std::memcpy(out + i, &acc, sizeof(acc));
    if (out2) std::memcpy(out2 + i, &acc, sizeof(acc));
  }
  for (; i < count; ++i) {
    float acc = in[0][i];
    for (int k = 1; k < n; ++k) acc += in[k][i];
    out[i] = acc;
    if (out2) out2[i] = acc;
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void SumHalf(uint16_t* out, uint16_t* out2, const uint16_t* const* in, int n, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float acc = Load(in[0][i]);
    for (int k = 1; k < n; ++k) acc += Load(in[k][i]);
    const uint16_t r = Store(acc);
    out[i] = r;
    if (out2) out2[i] = r;
  }
}

}  // namespace

size_t ElemSize(ElemType t) { return t == ElemType::kF32 ? 4 : 2; }

const char* ElemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kF32: return "float32";
    case ElemType::kBF16: return "bfloat16";
    case ElemType::kF16: return "float16";
  }
  return "?";
}

float BF16ToFloat(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7fffffff;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value / 2^-24, rounded to nearest even.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) ... lands the value in units of 2^-24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t v = abs - ((127 - 15) << 23);  // rebias exponent
  v += 0xfff + ((v >> 13) & 1);           // round to nearest even at bit 13
  return static_cast<uint16_t>(sign | (v >> 13));
}

void SumInto(ElemType t, void* out, void* out2, const void* const* in, int n, size_t count) {
  if (count == 0 || n <= 0) return;
  switch (t) {
    case ElemType::kF32:
      SumF32(static_cast<float*>(out), static_cast<float*>(out2), reinterpret_cast<const float* const*>(in), n, count);
      return;
    case ElemType::kBF16:
      SumHalf<BF16ToFloat, FloatToBF16>(static_cast<uint16_t*>(out), static_cast<uint16_t*>(out2),
                                        reinterpret_cast<const uint16_t* const*>(in), n, count);
      return;
    case ElemType::kF16:
      SumHalf<F16ToFloat, FloatToF16>(static_cast<uint16_t*>(out), static_cast<uint16_t*>(out2),
                                      reinterpret_cast<const uint16_t* const*>(in), n, count);
      return;
  }
}

}  // namespace psync::comm::shm
