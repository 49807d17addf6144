// Built instead of the CUDA sources when psync is configured without nvcc:
// the tensor API stays the same and every CUDA path throws TensorError.
#include "worker/tensor/cuda/cuda_ops.h"
#include "worker/tensor/tensor.h"

namespace psync::cuda_ops {
namespace {
[[noreturn]] void NoCuda() { throw TensorError(kNoCudaMessage); }
}  // namespace

int DeviceCount(std::string* why) {
  if (why) *why = kNoCudaMessage;
  return 0;
}
void* Allocate(size_t, int) { NoCuda(); }
void Free(void*, int) noexcept {}
void CopyBytes(void*, Device, const void*, Device, size_t) { NoCuda(); }
void SetCurrentDevice(int) { NoCuda(); }
void Synchronize(int) { NoCuda(); }
void Gemm(int, bool, bool, int64_t, int64_t, int64_t, const float*, const float*, float*) { NoCuda(); }
void Binary(int, BinaryOp, const float*, const float*, float*, int64_t) { NoCuda(); }
void Fill(int, float*, int64_t, float) { NoCuda(); }
void FillFromDeviceScalar(int, float*, int64_t, const float*, float) { NoCuda(); }
void Scale(int, const float*, float*, int64_t, float) { NoCuda(); }
void Axpy(int, float, const float*, float*, int64_t) { NoCuda(); }
void AddBias(int, const float*, const float*, float*, int64_t, int64_t) { NoCuda(); }
void SumRows(int, const float*, float*, int64_t, int64_t) { NoCuda(); }
void Relu(int, const float*, float*, int64_t) { NoCuda(); }
void ReluBackward(int, const float*, const float*, float*, int64_t) { NoCuda(); }
void Sum(int, const float*, float*, int64_t, double) { NoCuda(); }
void LogSoftmax(int, const float*, float*, int64_t, int64_t) { NoCuda(); }
void CrossEntropy(int, const float*, const float*, float*, int64_t, int64_t) { NoCuda(); }
void CrossEntropyBackward(int, const float*, const float*, const float*, float*, int64_t, int64_t) {
  NoCuda();
}

}  // namespace psync::cuda_ops
