// Neural-network ops: softmax, losses. float32 anywhere, float64 on the CPU.
#pragma once

#include "worker/tensor/tensor.h"

namespace psync::ops {

// Row-wise log-softmax of [N,C].
Tensor LogSoftmax(const Tensor& logits);
// Mean over rows of -log_softmax(logits)[i, targets[i]]: logits [N,C],
// targets [N] int64 class indices in [0, C). Returns shape []. On the CPU an
// index out of range throws TensorError naming the row; on CUDA it makes the
// loss NaN (the device cannot throw).
Tensor CrossEntropy(const Tensor& logits, const Tensor& targets);
// d(CrossEntropy)/d(logits) times grad (one element, any device):
// grad * (softmax(logits) - onehot(targets)) / N.
Tensor CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets);

}  // namespace psync::ops
