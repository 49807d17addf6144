#include "worker/comm/shm/reduce_sum.h"

#include <cstdint>
#include <cstring>

#include "psync/tensor/half.h"

namespace psync::comm::shm {
namespace {

typedef float V16 __attribute__((vector_size(64)));

// Why target_clones: the binary stays portable (x86-64 baseline) while the
// hot loop runs with AVX-512 or AVX2 where the CPU has them.
__attribute__((target_clones("avx512f", "avx2", "default"))) void SumF32(float* out, float* out2,
                                                                          const float* const* in, int n, size_t count,
                                                                          float scale) {
  const bool scaled = scale != 1.0f;
  V16 s;
  for (int l = 0; l < 16; ++l) s[l] = scale;
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    V16 acc;
    std::memcpy(&acc, in[0] + i, sizeof(acc));
    for (int k = 1; k < n; ++k) {
      V16 x;
      std::memcpy(&x, in[k] + i, sizeof(x));
      acc += x;
    }
    if (scaled) acc *= s;
    std::memcpy(out + i, &acc, sizeof(acc));
    if (out2) std::memcpy(out2 + i, &acc, sizeof(acc));
  }
  for (; i < count; ++i) {
    float acc = in[0][i];
    for (int k = 1; k < n; ++k) acc += in[k][i];
    if (scaled) acc *= scale;
    out[i] = acc;
    if (out2) out2[i] = acc;
  }
}

void SumF64(double* out, double* out2, const double* const* in, int n, size_t count, float scale) {
  const double s = static_cast<double>(scale);
  for (size_t i = 0; i < count; ++i) {
    double acc = in[0][i];
    for (int k = 1; k < n; ++k) acc += in[k][i];
    if (scale != 1.0f) acc *= s;
    out[i] = acc;
    if (out2) out2[i] = acc;
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void SumHalf(uint16_t* out, uint16_t* out2, const uint16_t* const* in, int n, size_t count, float scale) {
  for (size_t i = 0; i < count; ++i) {
    float acc = Load(in[0][i]);
    for (int k = 1; k < n; ++k) acc += Load(in[k][i]);
    if (scale != 1.0f) acc *= scale;
    const uint16_t r = Store(acc);
    out[i] = r;
    if (out2) out2[i] = r;
  }
}

}  // namespace

bool Summable(DType t) { return t == kFloat32 || t == kFloat64 || t == kBFloat16 || t == kFloat16; }

void SumInto(DType t, void* out, void* out2, const void* const* in, int n, size_t count, float scale) {
  if (count == 0 || n <= 0) return;
  switch (t) {
    case DType::kFloat32:
      SumF32(static_cast<float*>(out), static_cast<float*>(out2), reinterpret_cast<const float* const*>(in), n, count,
             scale);
      return;
    case DType::kFloat64:
      SumF64(static_cast<double*>(out), static_cast<double*>(out2), reinterpret_cast<const double* const*>(in), n,
             count, scale);
      return;
    case DType::kBFloat16:
      SumHalf<BFloat16::ToFloat, BFloat16::FromFloat>(static_cast<uint16_t*>(out), static_cast<uint16_t*>(out2),
                                                      reinterpret_cast<const uint16_t* const*>(in), n, count, scale);
      return;
    case DType::kFloat16:
      SumHalf<Float16::ToFloat, Float16::FromFloat>(static_cast<uint16_t*>(out), static_cast<uint16_t*>(out2),
                                                    reinterpret_cast<const uint16_t* const*>(in), n, count, scale);
      return;
    case DType::kInt64:
      return;  // not Summable: the groups reject it before
  }
}

}  // namespace psync::comm::shm
