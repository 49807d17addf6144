// Building blocks for CPU kernels that GCC vectorizes (internal to
// worker/tensor/cpu).
//
// Results never depend on the vector ISA: everything here is written as
// scalar code with one fixed order of operations, so the SSE2 baseline, the
// AVX2 and AVX-512 clones (PSYNC_CPU_CLONES) and the compiler's choice of
// vector width all give the same bits. No FMA is ever emitted (the sources
// with clones build with -ffp-contract=off, so the x86-64-v4 clone, which
// has FMA instructions, never contracts a*b+c).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "psync/tensor/half.h"

namespace psync::cpu {

// A function marked PSYNC_CPU_CLONES is compiled three times, for the
// x86-64 baseline, AVX2 and x86-64-v4 (AVX-512), and the loader picks the
// widest copy the CPU runs (GCC function multiversioning). The loops are the
// same; AVX2 does twice as many lanes per instruction, AVX-512 four times
// (GELU forward 0.65 -> 0.30 ms over 1024 x 512 floats on this project's
// AMD EPYC, whose AVX-512 runs on 256-bit units).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(PSYNC_NO_CPU_CLONES)
#define PSYNC_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define PSYNC_CPU_CLONES
#endif

// The helpers below must be inlined into each clone to be compiled for its
// target (an out-of-line copy would be baseline code, called per row).
#define PSYNC_CPU_INLINE inline __attribute__((always_inline))

// Storage <-> math conversions of dtype-generic kernels (dtype.h
// PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16): Load<T>(s) widens an element stored
// as S to the math type T, Store<S>(t) rounds it back. For float and double
// both are the identity; a BFloat16 widens exactly (its bits are the top half
// of a float) and rounds to nearest even with NaN kept NaN, as
// BFloat16::FromFloat, written branch-free so that loops vectorize.
template <typename T, typename S>
PSYNC_CPU_INLINE T Load(S v) {
  if constexpr (std::is_same_v<S, BFloat16>) {
    const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return static_cast<T>(f);
  } else {
    return static_cast<T>(v);
  }
}

// The bits of f rounded to bfloat16 (the body of Store<BFloat16>; loops
// that write raw uint16_t vectorize where a BFloat16 store may not).
PSYNC_CPU_INLINE uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

template <typename S, typename T>
PSYNC_CPU_INLINE S Store(T v) {
  if constexpr (std::is_same_v<S, BFloat16>) {
    BFloat16 b;
    b.bits = Bf16Bits(static_cast<float>(v));
    return b;
  } else {
    return static_cast<S>(v);
  }
}

// exp(x) by range reduction (x = k ln2 + r, |r| <= ln2/2) and a Taylor
// polynomial in r, scaled by 2^k through exponent bits: straight-line code
// (the clamps are selects) that vectorizes, unlike a libm call.
// Within 1.2 ulp of the exact value in float and in double (the float64
// gradient checks need full precision). Above the largest finite result
// +inf; results below the smallest normal number are flushed to 0; NaN
// stays NaN.
template <typename T>
T Exp(T x);

// 2^k for an integral k given as t = k + round (the float/double of t holds
// k in its low mantissa bits): k is split into halves so that both scale
// factors stay normal over the whole range of results.
template <>
PSYNC_CPU_INLINE float Exp<float>(float x) {
  constexpr float kLo = -87.33654f, kHi = 88.72283f;
  const float c = x < kLo ? kLo : (x > kHi ? kHi : x);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float k = (c * 1.44269504088896341f + kRound) - kRound;
  const float r = (c - k * 0.693145751953125f) - k * 1.428606765330187e-06f;  // k * ln2_hi is exact
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float ta = k * 0.5f + kRound, ka = ta - kRound, tb = (k - ka) + kRound;
  int32_t ia, ib;
  std::memcpy(&ia, &ta, sizeof(ia));
  std::memcpy(&ib, &tb, sizeof(ib));
  const int32_t ba = ((ia - 0x4B400000) + 127) << 23, bb = ((ib - 0x4B400000) + 127) << 23;
  float sa, sb;
  std::memcpy(&sa, &ba, sizeof(sa));
  std::memcpy(&sb, &bb, sizeof(sb));
  const float e = (p * sa) * sb;
  return x > kHi ? __builtin_inff() : (x < kLo ? 0.0f : e);
}

template <>
PSYNC_CPU_INLINE double Exp<double>(double x) {
  constexpr double kLo = -708.3964185322641, kHi = 709.782712893384;
  const double c = x < kLo ? kLo : (x > kHi ? kHi : x);
  constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52
  const double k = (c * 1.4426950408889634 + kRound) - kRound;
  const double r = (c - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const double ta = k * 0.5 + kRound, ka = ta - kRound, tb = (k - ka) + kRound;
  int64_t ia, ib;
  std::memcpy(&ia, &ta, sizeof(ia));
  std::memcpy(&ib, &tb, sizeof(ib));
  const int64_t ba = ((ia - 0x4338000000000000LL) + 1023) << 52, bb = ((ib - 0x4338000000000000LL) + 1023) << 52;
  double sa, sb;
  std::memcpy(&sa, &ba, sizeof(sa));
  std::memcpy(&sb, &bb, sizeof(sb));
  const double e = (p * sa) * sb;
  return x > kHi ? __builtin_inf() : (x < kLo ? 0.0 : e);
}

// The sum of f(j) over j in [0, n) in double, in one fixed order: eight
// interleaved partial sums (partial k takes j = k, k+8, ...; the tail goes
// to partials 0..) combined as a fixed tree. The compiler maps the eight
// partials onto vector lanes; the order, hence the result, is the same at
// every vector width and on every run.
template <typename F>
PSYNC_CPU_INLINE double SumInOrder(int64_t n, F f) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += f(j + k);
  }
  for (int k = 0; j + k < n; ++k) acc[k] += f(j + k);
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// Two sums at once, each in SumInOrder's order (one pass over the data):
// f(j, &a, &b) sets the j-th terms. Returns them through *sum_a, *sum_b.
template <typename F>
PSYNC_CPU_INLINE void SumInOrder2(int64_t n, F f, double* sum_a, double* sum_b) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int k = 0; k < 8; ++k) {
      double ta, tb;
      f(j + k, &ta, &tb);
      a[k] += ta;
      b[k] += tb;
    }
  }
  for (int k = 0; j + k < n; ++k) {
    double ta, tb;
    f(j + k, &ta, &tb);
    a[k] += ta;
    b[k] += tb;
  }
  *sum_a = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  *sum_b = ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

// max over j in [0, n) (n >= 1) of f(j), as `v > m ? v : m` in eight lanes
// (the form of the x86 max instruction, so it vectorizes). The max of
// numbers does not depend on the order; a NaN is kept or skipped as that
// select does.
template <typename T, typename F>
PSYNC_CPU_INLINE T MaxOf(int64_t n, F f) {
  const T first = f(0);
  T m[8] = {first, first, first, first, first, first, first, first};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int k = 0; k < 8; ++k) {
      const T v = f(j + k);
      m[k] = v > m[k] ? v : m[k];
    }
  }
  for (int k = 0; j + k < n; ++k) {
    const T v = f(j + k);
    m[k] = v > m[k] ? v : m[k];
  }
  T r = m[0];
  for (int k = 1; k < 8; ++k) r = m[k] > r ? m[k] : r;
  return r;
}

}  // namespace psync::cpu
