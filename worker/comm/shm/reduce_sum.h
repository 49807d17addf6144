// The element-wise sum the shared-memory collectives reduce with.
//
// out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + ... : always in input
// (= local rank) order, so every rank that sums the same inputs gets the
// same bits, on every run. Vectorised per element only (lanes never add
// into each other), so the vector and scalar paths round identically.
// bfloat16 / float16 inputs are accumulated in float and rounded once
// (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>

namespace psync::comm::shm {

enum class ElemType : uint32_t { kF32 = 0, kBF16 = 1, kF16 = 2 };
size_t ElemSize(ElemType t);
const char* ElemTypeName(ElemType t);

// `out` may be one of the inputs (the same pointer, not a partial overlap);
// `out2`, when not null, receives a copy of the result.
void SumInto(ElemType t, void* out, void* out2, const void* const* in, int n, size_t count);

// Conversions used for bf16/fp16 (exposed for tests).
float BF16ToFloat(uint16_t v);
uint16_t FloatToBF16(float f);
float F16ToFloat(uint16_t v);
uint16_t FloatToF16(float f);

}  // namespace psync::comm::shm
