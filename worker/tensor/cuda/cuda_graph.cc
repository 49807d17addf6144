#include "worker/tensor/cuda/cuda_graph.h"

#include "worker/tensor/cuda/cuda_context.h"
#include "psync/tensor/tensor.h"

namespace psync::cuda_graph {

struct StepGraph::Impl {
  int device = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

StepGraph::StepGraph(int device, const std::function<void()>& queue) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::ComputeStream(device);
  PSYNC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  try {
    queue();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);  // leave the stream usable
    if (broken != nullptr) cudaGraphDestroy(broken);
    cudaGetLastError();
    throw;
  }
  PSYNC_CUDA_CHECK(cudaStreamEndCapture(stream, &impl_->graph));
  PSYNC_CUDA_CHECK(cudaGraphInstantiateWithFlags(&impl_->exec, impl_->graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
}

StepGraph::~StepGraph() {
  if (impl_->exec != nullptr) cudaGraphExecDestroy(impl_->exec);
  if (impl_->graph != nullptr) cudaGraphDestroy(impl_->graph);
}

void StepGraph::Replay() {
  cuda::DeviceGuard guard(impl_->device);
  PSYNC_CUDA_CHECK(cudaGraphLaunch(impl_->exec, cuda::ComputeStream(impl_->device)));
}

}  // namespace psync::cuda_graph
