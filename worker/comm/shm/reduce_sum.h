// The element-wise sum the shared-memory collectives reduce with.
//
// out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + ... : always in input
// (= local rank) order, so every rank that sums the same inputs gets the
// same bits, on every run. Vectorised per element only (lanes never add
// into each other), so the vector and scalar paths round identically.
// bfloat16 / float16 inputs are accumulated in float and rounded once
// (round to nearest even, include/psync/tensor/half.h), so a compressed gradient
// loses precision once, not once per rank.
#pragma once

#include <cstddef>

#include "psync/tensor/dtype.h"

namespace psync::comm::shm {

// float32, float64, bfloat16 and float16 (the types a sum is defined for).
bool Summable(DType t);

// `out` may be one of the inputs (the same pointer, not a partial overlap);
// `out2`, when not null, receives a copy of the result. `t` must be Summable.
// `scale` != 1: the sum is multiplied by it before it is stored. float32 /
// float64: the same bits as scaling the stored sum afterwards; 16-bit: the
// float sum is scaled before its one rounding (not the same bits as
// rounding, then scaling by a 16-bit factor).
void SumInto(DType t, void* out, void* out2, const void* const* in, int n, size_t count, float scale = 1.0f);

}  // namespace psync::comm::shm
