// Tensor operations needed for MLP training. Each op dispatches on the
// device of its inputs: cpu/ (OpenBLAS + loops) or cuda/ (cuBLAS + kernels,
// asynchronous on the device's compute stream). All inputs of an op must be
// on the same device and defined; otherwise TensorError names the op, the
// shapes and the devices.
#pragma once

#include "worker/tensor/tensor.h"

namespace psync::ops {

// ---- out-of-place
// op(a) @ op(b), op = transpose when the flag is set. a: [m,k] ([k,m] if
// trans_a), b: [k,n] ([n,k] if trans_b). Result [m,n].
Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// Same, written into `out` ([m,n], same device, not overlapping a or b;
// e.g. a DDP bucket slot) and returned; an undefined `out` = Matmul. Same
// values as Matmul.
Tensor MatmulInto(Tensor out, const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
Tensor AddBias(const Tensor& x, const Tensor& bias);  // x [N,C] + bias [C] broadcast over rows
Tensor SumRows(const Tensor& x);                      // [N,C] -> [C] (sum over rows)
Tensor SumRowsInto(Tensor out, const Tensor& x);      // same, into out [C] (undefined: new); returns it
Tensor Add(const Tensor& a, const Tensor& b);         // same shape
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Scale(const Tensor& a, float s);
Tensor Relu(const Tensor& x);
Tensor ReluBackward(const Tensor& grad, const Tensor& relu_out);  // grad * (relu_out > 0)
Tensor Sum(const Tensor& x);   // -> shape []
Tensor Mean(const Tensor& x);  // -> shape []
// Row-wise log-softmax of [N,C].
Tensor LogSoftmax(const Tensor& logits);
// Mean over rows of -log_softmax(logits)[i, labels[i]]. labels: [N] holding
// class indices as floats (0..C-1). Returns shape [].
Tensor CrossEntropy(const Tensor& logits, const Tensor& labels);
// d(CrossEntropy)/d(logits) scaled by grad (shape [] tensor):
// grad * (softmax(logits) - onehot(labels)) / N.
Tensor CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& labels);
// grad (shape [], any device) broadcast to `shape`, times `scale`.
Tensor Expand(const Tensor& scalar, const Shape& shape, float scale = 1.0f);

// ---- in place
void Fill(Tensor& t, float value);
void Copy(Tensor& dst, const Tensor& src);            // any devices; numel must match
void Axpy(float alpha, const Tensor& x, Tensor& y);   // y += alpha * x
void AddInPlace(Tensor& y, const Tensor& x);          // y += x
void ScaleInPlace(Tensor& t, float s);                // t *= s

// Max |a - b| (copies to host); for tests and checks.
float MaxAbsDiff(const Tensor& a, const Tensor& b);

// Waits until all queued work on `device` is done (no-op on CPU).
void Synchronize(Device device);

}  // namespace psync::ops
