// bfloat16 matrix products on the CPU through oneDNN (internal to
// worker/tensor/cpu): bf16 x bf16 with float32 accumulation, the result in
// bfloat16 or float32. Debian's OpenBLAS has no sbgemm; oneDNN's brgemm
// kernels use AVX512-BF16 (vdpbf16ps) where the CPU has it, about 2x
// OpenBLAS sgemm's throughput at the GPT's shapes on this project's AMD EPYC
// machines (bench/README.md), and an AVX-512 or AVX2 fallback elsewhere.
#pragma once

#include "worker/tensor/ops/blas_kernels.h"

namespace psync::cpu {

// c = op(a) @ op(b) (+ bias) for g.dtype == bfloat16, c bfloat16 or float32,
// epilogue kNone or kBias (the others are built on it by cpu/blas.cc).
// Operands whose layout oneDNN's fast kernels cannot read (a row stride
// other than the row length, batch dims that do not collapse into one
// stride) are copied to a dense scratch first. Threads: as many as
// OpenBLAS's (openblas_get_num_threads), so one setting governs both.
void OneDnnGemm(const ops::GemmArgs& g);

}  // namespace psync::cpu
