// CUDA embedding kernels (internal to worker/tensor/cuda): their own file
// because the backward's stable sort pulls in CUB, which is slow to compile.
// Contracts: NnKernels::Embedding / EmbeddingBackward in ops/nn_kernels.h.
#pragma once

#include "psync/tensor/tensor.h"

namespace psync::cuda {

void EmbeddingForward(const Tensor& ids, const Tensor& weight, const Tensor& y);
void EmbeddingBackward(const Tensor& grad, const Tensor& ids, const Tensor& dweight);

}  // namespace psync::cuda
