// Differentiable functions on Variable.
//
// Each function computes its result with worker/tensor/ops.h and, when any
// input requires grad, records a backward node (named "<Op>Backward") that
// saves only what its gradient formula needs and drops it in
// ReleaseVariables. Nodes get next edges only for inputs that require grad;
// the result requires grad iff some input does. Shape and device errors
// throw psync::TensorError (from the tensor ops), like the ops themselves.
//
// Backward through a node whose saved tensors were released (an earlier
// backward without retain_graph) throws GraphFreedError, which the engine
// reports as FailedPrecondition naming the node.
#pragma once

#include "worker/autograd/variable.h"

namespace psync::autograd {

// a [m,k] @ b [k,n] -> [m,n].
Variable Matmul(const Variable& a, const Variable& b);
// a [..., m, k] @ b [..., k, n] -> [..., m, n] with identical batch dims, like
// torch.matmul without broadcasting. Strided inputs (e.g. a Transpose view)
// are multiplied in place.
Variable BatchedMatmul(const Variable& a, const Variable& b);
// x [..., in] @ weight[out,in]^T + bias[out] -> [..., out], like
// torch.nn.functional.linear (every leading dim of x is a row). `bias` may be
// undefined (no bias).
Variable Linear(const Variable& x, const Variable& weight, const Variable& bias);
// The same, with the product reading `weight_value` (weight's shape) instead
// of weight.data(): the weight's bfloat16 copy in a bf16 step
// (nn/precision.h). x has weight_value's dtype (Cast it first); the result
// too (the bias, float32, is added before it is rounded). The weight's
// gradient is computed in the weight's own dtype (float32 from bfloat16
// activations, into its DDP bucket slot), the bias's in float32.
Variable Linear(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& weight_value);
// x converted to `dtype` (float32 <-> bfloat16, rounding to nearest even);
// the gradient is converted back to x's dtype. x itself when it has dtype.
Variable Cast(const Variable& x, DType dtype);
Variable Relu(const Variable& x);
// Elementwise, same shapes (no broadcasting).
Variable Add(const Variable& a, const Variable& b);
Variable Sub(const Variable& a, const Variable& b);
Variable Mul(const Variable& a, const Variable& b);
Variable Scale(const Variable& x, float s);
// Reductions over all elements -> shape [].
Variable Sum(const Variable& x);
Variable Mean(const Variable& x);
// mean((pred - target)^2) over all elements -> shape []. Same shapes;
// target may require grad too.
Variable MseLoss(const Variable& pred, const Variable& target);
// logits [N,C]; targets [N] int64 class indices in [0, C) (no gradient).
// Mean over rows of -log_softmax(logits)[i, targets[i]] -> shape [].
Variable CrossEntropyLoss(const Variable& logits, const Tensor& targets);

}  // namespace psync::autograd
