// Built instead of the CUDA sources when psync is configured without nvcc:
// the tensor API stays the same, CUDA reports no devices, and every CUDA
// path (memory, copies, each op family's kernels) throws TensorError.
#include "worker/tensor/cuda/cuda_device.h"
#include "worker/tensor/ops/attention_kernels.h"
#include "worker/tensor/cuda/cuda_graph.h"
#include "worker/tensor/ops/blas_kernels.h"
#include "worker/tensor/ops/copy_kernels.h"
#include "worker/tensor/ops/nn_kernels.h"
#include "worker/tensor/ops/optim_kernels.h"
#include "worker/tensor/ops/pointwise_kernels.h"
#include "worker/tensor/ops/reduce_kernels.h"
#include "psync/tensor/tensor.h"

namespace psync {
namespace {
[[noreturn]] void NoCuda() { throw TensorError(cuda_device::kNoCudaMessage); }
}  // namespace

namespace cuda_device {
int DeviceCount(std::string* why) {
  if (why) *why = kNoCudaMessage;
  return 0;
}
void* Allocate(size_t, int) { NoCuda(); }
void Free(void*, int) noexcept {}
void CopyBytes(void*, Device, const void*, Device, size_t) { NoCuda(); }
void SetCurrentDevice(int) { NoCuda(); }
void Synchronize(int) { NoCuda(); }
uint64_t PeakBytes(int) { return 0; }
void ResetPeakBytes(int) {}
uint64_t InUseBytes(int) { return 0; }
}  // namespace cuda_device

namespace cuda_graph {
struct StepGraph::Impl {};
StepGraph::StepGraph(int, const std::function<void()>&) { NoCuda(); }
StepGraph::~StepGraph() = default;
void StepGraph::Replay() { NoCuda(); }
}  // namespace cuda_graph

namespace ops {
const CopyKernels& CudaCopyKernels() { NoCuda(); }
const PointwiseKernels& CudaPointwiseKernels() { NoCuda(); }
const ReduceKernels& CudaReduceKernels() { NoCuda(); }
const BlasKernels& CudaBlasKernels() { NoCuda(); }
const NnKernels& CudaNnKernels() { NoCuda(); }
const OptimKernels& CudaOptimKernels() { NoCuda(); }
const AttentionKernels& CudaAttentionKernels() { NoCuda(); }
}  // namespace ops

}  // namespace psync
