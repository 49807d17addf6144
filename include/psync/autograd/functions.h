// Differentiable functions on Variable.
//
// Each function computes its result with include/psync/tensor/ops.h and, when any
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

#include "psync/autograd/variable.h"

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
// Linear without bias whose product runs over padded rows of the weight:
// padded [out_p, in] (out_p >= out) holds weight's values in its first `out`
// rows (weight is usually a view of them) and zeros after. Returns [..., out],
// a view with row stride out_p of x @ padded^T (the pad columns are never in
// the result). Rows of a multiple of 128 keep the product and whatever reads
// its rows aligned on GPUs (the GPT's vocabulary, padded as llm.c pads it).
// Gradients are Linear's (from weight, not padded).
Variable LinearPadded(const Variable& x, const Variable& weight, const Tensor& padded);

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
// CrossEntropyLoss fused with its backward (ops::FusedClassifier, llm.c's
// fused_classifier), for logits nothing reads afterwards (a model's output
// on its way to the loss): when logits requires grad, the forward writes
// d(loss)/d(logits) times expected_grad over the logits in place (one pass;
// no second [N, C] tensor), and the backward hands that tensor on, rescaled
// on the device only when the gradient it receives is not expected_grad (the
// trainer passes 1/accumulate, what its loss receives). Rows may be strided
// (a view of padded rows). Without a gradient (evaluation, no_grad) this is
// CrossEntropyLoss and the logits keep their values.
Variable FusedCrossEntropyLoss(const Variable& logits, const Tensor& targets, float expected_grad = 1.0f);

}  // namespace psync::autograd
