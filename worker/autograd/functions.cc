#include "worker/autograd/functions.h"

#include <initializer_list>
#include <string>
#include <utility>

#include "worker/autograd/accumulate_grad.h"
#include "worker/tensor/ops.h"

namespace psync::autograd {
namespace {

// Base of every backward node here. Apply handles what all of them share:
// the freed-graph check, undefined incoming gradients, and packing the
// per-input gradients into per-edge outputs (only inputs requiring grad
// have an edge).
class FunctionNode : public Node {
 public:
  std::string name() const final { return name_; }

  TensorList Apply(TensorList&& grads) final {
    if (released_) {
      throw GraphFreedError(name_ +
                            ": its saved tensors were freed by an earlier backward (graph freed); call backward "
                            "with retain_graph=true to run backward through the same graph twice");
    }
    TensorList out;
    out.reserve(next_edges().size());
    if (grads.empty() || !grads[0].defined()) {
      out.resize(next_edges().size());  // nothing flows in, nothing flows out
      return out;
    }
    TensorList per_input = Backward(grads[0]);
    for (size_t i = 0; i < needs_grad_.size(); ++i) {
      if (needs_grad_[i]) out.push_back(std::move(per_input[i]));
    }
    return out;
  }

  void ReleaseVariables() final {
    if (!saves_tensors_) return;  // nothing to free: a second backward is fine
    released_ = true;
    ReleaseSaved();
  }

  // Adds an edge for every input that requires grad, in input order.
  void Connect(std::initializer_list<const Variable*> inputs) {
    for (const Variable* v : inputs) {
      const bool needs = v != nullptr && v->requires_grad();
      needs_grad_.push_back(needs);
      if (needs) add_next_edge(v->gradient_edge());
    }
  }

 protected:
  FunctionNode(std::string name, bool saves_tensors) : name_(std::move(name)), saves_tensors_(saves_tensors) {}
  bool needs_grad(size_t input) const { return needs_grad_[input]; }
  // Where the gradient of forward input `input` may be written instead of a
  // fresh tensor: the gradient destination of the leaf's AccumulateGrad
  // when the edge goes straight to one (a DDP bucket slot); undefined
  // otherwise. Only for gradients computed from scratch into it (never an
  // alias of another tensor), and only during Backward.
  Tensor OutputBuffer(size_t input, const Shape& shape, Device device) const {
    if (!needs_grad_[input]) return Tensor();
    size_t edge = 0;
    for (size_t i = 0; i < input; ++i) edge += needs_grad_[i] ? 1 : 0;
    const Edge& e = next_edges()[edge];
    if (!e.valid() || e.function->priority() != kAccumulateGradPriority) return Tensor();
    auto* acc = dynamic_cast<AccumulateGrad*>(e.function.get());
    return acc ? acc->TakeGradDestination(shape, device) : Tensor();
  }
  // One gradient per forward input (undefined where not needed), from the
  // gradient of the single output.
  virtual TensorList Backward(const Tensor& grad) = 0;
  virtual void ReleaseSaved() {}

 private:
  const std::string name_;
  const bool saves_tensors_;
  bool released_ = false;
  std::vector<bool> needs_grad_;
};

bool AnyRequiresGrad(std::initializer_list<const Variable*> inputs) {
  for (const Variable* v : inputs) {
    if (v != nullptr && v->requires_grad()) return true;
  }
  return false;
}

// Wraps `result`: a graph output when some input requires grad, else a
// plain leaf (no node is built, nothing is saved).
template <typename NodeT>
Variable Wrap(Tensor result, std::shared_ptr<NodeT> node) {
  if (!node) return Variable(std::move(result), false);
  return Variable::FromFunction(std::move(result), std::move(node));
}

void CheckDefined(const char* op, std::initializer_list<const Variable*> inputs) {
  for (const Variable* v : inputs) {
    if (!v->defined()) throw TensorError(std::string(op) + ": an input Variable is undefined");
  }
}

// ---------------------------------------------------------------- nodes

class MatmulBackward : public FunctionNode {
 public:
  MatmulBackward() : FunctionNode("MatmulBackward", true) {}
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

class LinearBackward : public FunctionNode {
 public:
  LinearBackward() : FunctionNode("LinearBackward", true) {}
  Tensor x, w;  // x saved iff weight needs grad, w iff x needs grad

 private:
  TensorList Backward(const Tensor& g) override {
    TensorList r(3);
    // Weight and bias gradients go straight into the leaves' gradient
    // destinations (DDP bucket slots) when they have one.
    if (needs_grad(0)) r[0] = ops::Matmul(g, w);  // [N,out] @ [out,in]
    if (needs_grad(1)) {
      r[1] = ops::MatmulInto(OutputBuffer(1, {g.size(1), x.size(1)}, g.device()), g, x, true, false);  // [out,N] @ [N,in]
    }
    if (needs_grad(2)) r[2] = ops::SumRowsInto(OutputBuffer(2, {g.size(1)}, g.device()), g);  // [out]
    return r;
  }
  void ReleaseSaved() override { x = w = Tensor(); }
};

class ReluBackward : public FunctionNode {
 public:
  ReluBackward() : FunctionNode("ReluBackward", true) {}
  Tensor out;  // the result: relu'(x) = (out > 0)

 private:
  TensorList Backward(const Tensor& g) override { return {ops::ReluBackward(g, out)}; }
  void ReleaseSaved() override { out = Tensor(); }
};

class AddBackward : public FunctionNode {
 public:
  AddBackward() : FunctionNode("AddBackward", false) {}

 private:
  TensorList Backward(const Tensor& g) override { return {g, g}; }
};

class SubBackward : public FunctionNode {
 public:
  SubBackward() : FunctionNode("SubBackward", false) {}

 private:
  TensorList Backward(const Tensor& g) override {
    TensorList r(2);
    if (needs_grad(0)) r[0] = g;
    if (needs_grad(1)) r[1] = ops::Scale(g, -1.0f);
    return r;
  }
};

class MulBackward : public FunctionNode {
 public:
  MulBackward() : FunctionNode("MulBackward", true) {}
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

class ScaleBackward : public FunctionNode {
 public:
  explicit ScaleBackward(float s) : FunctionNode("ScaleBackward", false), s_(s) {}

 private:
  TensorList Backward(const Tensor& g) override { return {ops::Scale(g, s_)}; }
  const float s_;
};

// Sum and Mean: the scalar gradient spread over the input's shape.
class ReduceBackward : public FunctionNode {
 public:
  ReduceBackward(std::string name, Shape shape, float scale)
      : FunctionNode(std::move(name), false), shape_(std::move(shape)), scale_(scale) {}

 private:
  TensorList Backward(const Tensor& g) override { return {ops::Expand(g, shape_, scale_)}; }
  const Shape shape_;
  const float scale_;
};

class MseLossBackward : public FunctionNode {
 public:
  MseLossBackward() : FunctionNode("MseLossBackward", true) {}
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

class CrossEntropyLossBackward : public FunctionNode {
 public:
  CrossEntropyLossBackward() : FunctionNode("CrossEntropyLossBackward", true) {}
  Tensor logits, labels;

 private:
  TensorList Backward(const Tensor& g) override {
    return {ops::CrossEntropyBackward(g, logits, labels), Tensor()};
  }
  void ReleaseSaved() override { logits = labels = Tensor(); }
};

// Builds the node (only when some input requires grad) and connects it.
template <typename NodeT, typename... Args>
std::shared_ptr<NodeT> MakeNode(std::initializer_list<const Variable*> inputs, Args&&... args) {
  if (!AnyRequiresGrad(inputs)) return nullptr;
  auto node = std::make_shared<NodeT>(std::forward<Args>(args)...);
  node->Connect(inputs);
  return node;
}

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

Variable Linear(const Variable& x, const Variable& weight, const Variable& bias) {
  CheckDefined("Linear", {&x, &weight});
  if (x.data().dim() != 2 || weight.data().dim() != 2) {
    throw TensorError("Linear: x must be [N,in] and weight [out,in]; got x " + ShapeToString(x.shape()) +
                      ", weight " + ShapeToString(weight.shape()));
  }
  Tensor out = ops::Matmul(x.data(), weight.data(), false, true);
  if (bias.defined()) out = ops::AddBias(out, bias.data());
  auto node = MakeNode<LinearBackward>({&x, &weight, bias.defined() ? &bias : nullptr});
  if (node) {
    if (weight.requires_grad()) node->x = x.data();
    if (x.requires_grad()) node->w = weight.data();
  }
  return Wrap(std::move(out), node);
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

Variable CrossEntropyLoss(const Variable& logits, const Variable& labels) {
  CheckDefined("CrossEntropyLoss", {&logits, &labels});
  if (labels.requires_grad()) {
    throw TensorError("CrossEntropyLoss: labels are class indices and cannot require grad");
  }
  Tensor out = ops::CrossEntropy(logits.data(), labels.data());
  auto node = MakeNode<CrossEntropyLossBackward>({&logits, &labels});
  if (node) {
    node->logits = logits.data();
    node->labels = labels.data();
  }
  return Wrap(std::move(out), node);
}

}  // namespace psync::autograd
