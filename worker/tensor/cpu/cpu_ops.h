// CPU backend of psync_tensor, on raw pointers. Internal to worker/tensor/:
// ops.cc checks shapes and devices, then calls these.
//
// Determinism: N-rank training must equal 1-process training to float32
// round-off, so every reduction here is sequential with a fixed order and a
// double accumulator (Sum, Mean, SumRows, softmax sums, cross-entropy).
// Matmul uses OpenBLAS; its threading is left to OPENBLAS_NUM_THREADS.
#pragma once

#include <cstdint>

namespace psync::cpu_ops {

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
          const float* b, float* c);
void Add(const float* a, const float* b, float* y, int64_t n);
void Sub(const float* a, const float* b, float* y, int64_t n);
void Mul(const float* a, const float* b, float* y, int64_t n);
void Fill(float* y, int64_t n, float value);
void Scale(const float* x, float* y, int64_t n, float s);  // y may be x
void Axpy(float alpha, const float* x, float* y, int64_t n);
void AddBias(const float* x, const float* bias, float* y, int64_t rows, int64_t cols);
void SumRows(const float* x, float* y, int64_t rows, int64_t cols);
void Relu(const float* x, float* y, int64_t n);
void ReluBackward(const float* grad, const float* out, float* y, int64_t n);
double SumDouble(const float* x, int64_t n);
void LogSoftmax(const float* x, float* y, int64_t rows, int64_t cols);
// Throws TensorError for a label outside [0, cols) or not an integer.
float CrossEntropy(const float* logits, const float* labels, int64_t rows, int64_t cols);
void CrossEntropyBackward(float grad, const float* logits, const float* labels, float* y,
                          int64_t rows, int64_t cols);

}  // namespace psync::cpu_ops
