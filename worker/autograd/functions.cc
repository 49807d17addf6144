#include "psync/autograd/functions.h"

#include <initializer_list>
#include <string>
#include <utility>

#include "psync/autograd/function_node.h"
#include "psync/tensor/ops.h"

namespace psync::autograd {
namespace {

// ---------------------------------------------------------------- nodes

class MatmulBackward : public SingleOutputNode {
 public:
  MatmulBackward() : SingleOutputNode("MatmulBackward", true) {}
  Tensor a, b;  // a saved iff b needs grad, b iff a needs grad

 private:
  TensorList Backward(const Tensor& g) override {
    TensorList r(2);
    // Into the leaf's gradient destination (bucket slot) when it has one.
    if (needs_grad(0)) {
      r[0] = ops::MatmulInto(OutputBuffer(0, {g.size(0), b.size(0)}, g.device()), g, b, false, true);  // g b^T
    }
    if (needs_grad(1)) {
      r[1] = ops::MatmulInto(OutputBuffer(1, {a.size(1), g.size(1)}, g.device()), a, g, true, false);  // a^T g
    }
    return r;
  }
  void ReleaseSaved() override { a = b = Tensor(); }
};

class BatchedMatmulBackward : public SingleOutputNode {
 public:
  BatchedMatmulBackward() : SingleOutputNode("BatchedMatmulBackward", true) {}
  Tensor a, b;  // a saved iff b needs grad, b iff a needs grad

 private:
  TensorList Backward(const Tensor& g) override {
    TensorList r(2);
    if (needs_grad(0)) r[0] = ops::BatchedMatmul(g, b, false, true);  // g b^T
    if (needs_grad(1)) r[1] = ops::BatchedMatmul(a, g, true, false);  // a^T g
    return r;
  }
  void ReleaseSaved() override { a = b = Tensor(); }
};

class LinearBackward : public SingleOutputNode {
 public:
  LinearBackward(Shape x_shape, DType weight_dtype)
      : SingleOutputNode("LinearBackward", true), x_shape_(std::move(x_shape)), weight_dtype_(weight_dtype) {}
  Tensor x, w;  // x [N,in] (leading dims flattened) saved iff weight needs grad, w (the product's) iff x needs grad

 private:
  TensorList Backward(const Tensor& grad) override {
    const Tensor g = grad.Reshape({-1, grad.size(-1)});  // [N,out]
    TensorList r(3);
    if (needs_grad(0)) r[0] = ops::Matmul(g, w).Reshape(x_shape_);  // [N,out] @ [out,in]
    if (needs_grad(1)) {
      // [out,N] @ [N,in] in the parameter's own dtype (float32 from bfloat16
      // activations: no bfloat16 rounding of a weight gradient).
      r[1] = ops::MatmulInto(WeightGradBuffer(1, {g.size(1), x.size(1)}, weight_dtype_, g.device()), g, x, true,
                             false);
    }
    if (needs_grad(2)) r[2] = ops::SumRowsInto(OutputBuffer(2, {g.size(1)}, g.device()), g);  // [out]
    return r;
  }
  void ReleaseSaved() override { x = w = Tensor(); }
  const Shape x_shape_;
  const DType weight_dtype_;
};

class CastBackward : public SingleOutputNode {
 public:
  explicit CastBackward(DType input_dtype) : SingleOutputNode("CastBackward", false), dtype_(input_dtype) {}

 private:
  TensorList Backward(const Tensor& g) override { return {g.To(dtype_)}; }
  const DType dtype_;
};

class ReluBackward : public SingleOutputNode {
 public:
  ReluBackward() : SingleOutputNode("ReluBackward", true) {}
  Tensor out;  // the result: relu'(x) = (out > 0)

 private:
  TensorList Backward(const Tensor& g) override { return {ops::ReluBackward(g, out)}; }
  void ReleaseSaved() override { out = Tensor(); }
};

class AddBackward : public SingleOutputNode {
 public:
  AddBackward() : SingleOutputNode("AddBackward", false) {}

 private:
  TensorList Backward(const Tensor& g) override { return {g, g}; }
};

class SubBackward : public SingleOutputNode {
 public:
  SubBackward() : SingleOutputNode("SubBackward", false) {}

 private:
  TensorList Backward(const Tensor& g) override {
    TensorList r(2);
    if (needs_grad(0)) r[0] = g;
    if (needs_grad(1)) r[1] = ops::Scale(g, -1.0f);
    return r;
  }
};

class MulBackward : public SingleOutputNode {
 public:
  MulBackward() : SingleOutputNode("MulBackward", true) {}
  Tensor a, b;

 private:
  TensorList Backward(const Tensor& g) override {
    TensorList r(2);
    if (needs_grad(0)) r[0] = ops::Mul(g, b);
    if (needs_grad(1)) r[1] = ops::Mul(g, a);
    return r;
  }
  void ReleaseSaved() override { a = b = Tensor(); }
};

class ScaleBackward : public SingleOutputNode {
 public:
  explicit ScaleBackward(float s) : SingleOutputNode("ScaleBackward", false), s_(s) {}

 private:
  TensorList Backward(const Tensor& g) override { return {ops::Scale(g, s_)}; }
  const float s_;
};

// Sum and Mean: the scalar gradient spread over the input's shape.
class ReduceBackward : public SingleOutputNode {
 public:
  ReduceBackward(std::string name, Shape shape, float scale)
      : SingleOutputNode(std::move(name), false), shape_(std::move(shape)), scale_(scale) {}

 private:
  TensorList Backward(const Tensor& g) override { return {ops::Expand(g, shape_, scale_)}; }
  const Shape shape_;
  const float scale_;
};

class MseLossBackward : public SingleOutputNode {
 public:
  MseLossBackward() : SingleOutputNode("MseLossBackward", true) {}
  Tensor diff;  // pred - target

 private:
  TensorList Backward(const Tensor& g) override {
    // d/dpred mean(diff^2) = 2 diff / numel; the target gets the negative.
    Tensor d = ops::Mul(ops::Expand(g, diff.shape(), 2.0f / static_cast<float>(diff.numel())), diff);
    TensorList r(2);
    if (needs_grad(1)) r[1] = ops::Scale(d, -1.0f);
    if (needs_grad(0)) r[0] = std::move(d);
    return r;
  }
  void ReleaseSaved() override { diff = Tensor(); }
};

class CrossEntropyLossBackward : public SingleOutputNode {
 public:
  CrossEntropyLossBackward() : SingleOutputNode("CrossEntropyLossBackward", true) {}
  Tensor logits, targets;

 private:
  TensorList Backward(const Tensor& g) override { return {ops::CrossEntropyBackward(g, logits, targets)}; }
  void ReleaseSaved() override { logits = targets = Tensor(); }
};

class FusedCrossEntropyLossBackward : public SingleOutputNode {
 public:
  FusedCrossEntropyLossBackward(Tensor dlogits, float expected_grad)
      : SingleOutputNode("FusedCrossEntropyLossBackward", true), dlogits_(std::move(dlogits)), expected_(expected_grad) {}

 private:
  TensorList Backward(const Tensor& g) override {
    ops::RescaleClassifierGrad(dlogits_, g, expected_);  // nothing when g == expected_grad
    return {dlogits_};
  }
  void ReleaseSaved() override { dlogits_ = Tensor(); }
  Tensor dlogits_;  // the logits' storage, holding the gradient since the forward
  const float expected_;
};

}  // namespace

Variable Matmul(const Variable& a, const Variable& b) {
  CheckDefined("Matmul", {&a, &b});
  Tensor out = ops::Matmul(a.data(), b.data());
  auto node = MakeNode<MatmulBackward>({&a, &b});
  if (node) {
    if (b.requires_grad()) node->a = a.data();
    if (a.requires_grad()) node->b = b.data();
  }
  return Wrap(std::move(out), node);
}

Variable BatchedMatmul(const Variable& a, const Variable& b) {
  CheckDefined("BatchedMatmul", {&a, &b});
  Tensor out = ops::BatchedMatmul(a.data(), b.data());
  auto node = MakeNode<BatchedMatmulBackward>({&a, &b});
  if (node) {
    if (b.requires_grad()) node->a = a.data();
    if (a.requires_grad()) node->b = b.data();
  }
  return Wrap(std::move(out), node);
}

Variable Linear(const Variable& x, const Variable& weight, const Variable& bias) {
  CheckDefined("Linear", {&weight});
  return Linear(x, weight, bias, weight.data());
}

Variable Linear(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& weight_value) {
  CheckDefined("Linear", {&x, &weight});
  if (x.data().dim() < 1 || weight.data().dim() != 2 || x.data().size(-1) != weight.data().size(1)) {
    throw TensorError("Linear: x must be [..., in] and weight [out, in]; got x " + ShapeToString(x.shape()) +
                      ", weight " + ShapeToString(weight.shape()));
  }
  if (!weight_value.defined() || weight_value.shape() != weight.shape()) {
    throw TensorError("Linear: the weight's value " + weight_value.DebugString() + " must have the weight's shape " +
                      ShapeToString(weight.shape()));
  }
  // Every leading dim of x is a row: [..., in] -> [N, in] (a view when contiguous).
  const Tensor x2 = x.data().Reshape({-1, weight.data().size(1)});
  // One product with the bias as its epilogue (on the CPU in float32:
  // Matmul then AddBias, the same bits).
  Tensor out = ops::Linear(x2, weight_value, bias.defined() ? bias.data() : Tensor());
  Shape out_shape = x.shape();
  out_shape.back() = weight.data().size(0);
  out = out.Reshape(out_shape);
  auto node = MakeNode<LinearBackward>({&x, &weight, bias.defined() ? &bias : nullptr}, x.shape(),
                                       weight.data().dtype());
  if (node) {
    if (weight.requires_grad()) node->x = x2;
    if (x.requires_grad()) node->w = weight_value;
  }
  return Wrap(std::move(out), node);
}

Variable LinearPadded(const Variable& x, const Variable& weight, const Tensor& padded) {
  CheckDefined("LinearPadded", {&x, &weight});
  const Tensor& w = weight.data();
  if (x.data().dim() < 1 || w.dim() != 2 || x.data().size(-1) != w.size(1) || padded.dim() != 2 ||
      padded.size(1) != w.size(1) || padded.size(0) < w.size(0)) {
    throw TensorError("LinearPadded: x must be [..., in], weight [out, in] and padded [out_p >= out, in]; got x " +
                      ShapeToString(x.shape()) + ", weight " + ShapeToString(w.shape()) + ", padded " +
                      ShapeToString(padded.shape()));
  }
  const Tensor x2 = x.data().Reshape({-1, w.size(1)});
  Shape out_shape = x.shape();
  out_shape.back() = w.size(0);
  Tensor out = ops::Matmul(x2, padded, false, true).Narrow(1, 0, w.size(0)).Reshape(out_shape);
  auto node = MakeNode<LinearBackward>({&x, &weight, nullptr}, x.shape(), w.dtype());  // no bias
  if (node) {
    if (weight.requires_grad()) node->x = x2;
    if (x.requires_grad()) node->w = w;
  }
  return Wrap(std::move(out), node);
}

Variable Cast(const Variable& x, DType dtype) {
  CheckDefined("Cast", {&x});
  if (x.data().dtype() == dtype) return x;
  Tensor out = x.data().To(dtype);
  return Wrap(std::move(out), MakeNode<CastBackward>({&x}, x.data().dtype()));
}

Variable Relu(const Variable& x) {
  CheckDefined("Relu", {&x});
  Tensor out = ops::Relu(x.data());
  auto node = MakeNode<ReluBackward>({&x});
  if (node) node->out = out;
  return Wrap(std::move(out), node);
}

Variable Add(const Variable& a, const Variable& b) {
  CheckDefined("Add", {&a, &b});
  Tensor out = ops::Add(a.data(), b.data());
  return Wrap(std::move(out), MakeNode<AddBackward>({&a, &b}));
}

Variable Sub(const Variable& a, const Variable& b) {
  CheckDefined("Sub", {&a, &b});
  Tensor out = ops::Sub(a.data(), b.data());
  return Wrap(std::move(out), MakeNode<SubBackward>({&a, &b}));
}

Variable Mul(const Variable& a, const Variable& b) {
  CheckDefined("Mul", {&a, &b});
  Tensor out = ops::Mul(a.data(), b.data());
  auto node = MakeNode<MulBackward>({&a, &b});
  if (node) {
    if (b.requires_grad()) node->a = a.data();
    if (a.requires_grad()) node->b = b.data();
  }
  return Wrap(std::move(out), node);
}

Variable Scale(const Variable& x, float s) {
  CheckDefined("Scale", {&x});
  Tensor out = ops::Scale(x.data(), s);
  return Wrap(std::move(out), MakeNode<ScaleBackward>({&x}, s));
}

Variable Sum(const Variable& x) {
  CheckDefined("Sum", {&x});
  Tensor out = ops::Sum(x.data());
  return Wrap(std::move(out), MakeNode<ReduceBackward>({&x}, "SumBackward", x.shape(), 1.0f));
}

Variable Mean(const Variable& x) {
  CheckDefined("Mean", {&x});
  Tensor out = ops::Mean(x.data());
  const float scale = 1.0f / static_cast<float>(x.data().numel());
  return Wrap(std::move(out), MakeNode<ReduceBackward>({&x}, "MeanBackward", x.shape(), scale));
}

Variable MseLoss(const Variable& pred, const Variable& target) {
  CheckDefined("MseLoss", {&pred, &target});
  if (pred.shape() != target.shape()) {
    throw TensorError("MseLoss: pred " + ShapeToString(pred.shape()) + " and target " +
                      ShapeToString(target.shape()) + " must have the same shape");
  }
  Tensor diff = ops::Sub(pred.data(), target.data());
  Tensor out = ops::Mean(ops::Mul(diff, diff));
  auto node = MakeNode<MseLossBackward>({&pred, &target});
  if (node) node->diff = std::move(diff);
  return Wrap(std::move(out), node);
}

Variable CrossEntropyLoss(const Variable& logits, const Tensor& targets) {
  CheckDefined("CrossEntropyLoss", {&logits});
  Tensor out = ops::CrossEntropy(logits.data(), targets);
  auto node = MakeNode<CrossEntropyLossBackward>({&logits});
  if (node) {
    node->logits = logits.data();
    node->targets = targets;
  }
  return Wrap(std::move(out), node);
}

Variable FusedCrossEntropyLoss(const Variable& logits, const Tensor& targets, float expected_grad) {
  CheckDefined("FusedCrossEntropyLoss", {&logits});
  if (!AnyRequiresGrad({&logits})) return CrossEntropyLoss(logits, targets);
  if (!(expected_grad != 0.0f)) throw TensorError("FusedCrossEntropyLoss: expected_grad must be nonzero");
  Tensor out = ops::FusedClassifier(logits.data(), targets, expected_grad);
  return Wrap(std::move(out), MakeNode<FusedCrossEntropyLossBackward>({&logits}, logits.data(), expected_grad));
}

}  // namespace psync::autograd
