// FunctionNode: the base of every differentiable function's backward node,
// and the helpers that build one (shared by functions.cc, view_functions.cc
// and every other family of differentiable functions).
//
// Apply handles what all nodes share: the freed-graph check, outputs that got
// no gradient, and packing per-input gradients into per-edge outputs (only
// inputs that require grad have an edge). A node with several outputs (e.g.
// Split) implements BackwardAll, receiving one gradient per output
// (undefined where that output got none; at least one is defined). A node
// with one output derives from SingleOutputNode and implements Backward.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "psync/autograd/variable.h"

namespace psync::autograd {

class FunctionNode : public Node {
 public:
  std::string name() const final { return name_; }
  TensorList Apply(TensorList&& grads) final;
  void ReleaseVariables() final;

  // Adds an edge for every input that requires grad, in input order (null
  // entries are inputs that never need a gradient).
  void Connect(std::initializer_list<const Variable*> inputs);
  void Connect(const std::vector<const Variable*>& inputs);

 protected:
  FunctionNode(std::string name, bool saves_tensors) : name_(std::move(name)), saves_tensors_(saves_tensors) {}
  bool needs_grad(size_t input) const { return needs_grad_[input]; }
  size_t num_inputs() const { return needs_grad_.size(); }
  // Where the gradient of forward input `input` may be written instead of a
  // fresh tensor: the gradient destination of the leaf's AccumulateGrad
  // when the edge goes straight to one (a DDP bucket slot); undefined
  // otherwise. Only for gradients computed from scratch into it (never an
  // alias of another tensor), and only during backward.
  Tensor OutputBuffer(size_t input, const Shape& shape, Device device) const;
  // OutputBuffer, or else a new contiguous tensor of `dtype`: for a
  // parameter's gradient that must come out in the parameter's dtype
  // (float32) although the op computed from bfloat16 activations.
  Tensor WeightGradBuffer(size_t input, const Shape& shape, DType dtype, Device device) const;
  // One gradient per forward input (undefined where not needed), from the
  // gradients of the outputs (one per output).
  virtual TensorList BackwardAll(const TensorList& grads) = 0;
  virtual void ReleaseSaved() {}

 private:
  const std::string name_;
  const bool saves_tensors_;
  bool released_ = false;
  std::vector<bool> needs_grad_;
};

class SingleOutputNode : public FunctionNode {
 protected:
  using FunctionNode::FunctionNode;
  // One gradient per forward input, from the gradient of the single output.
  virtual TensorList Backward(const Tensor& grad) = 0;

 private:
  TensorList BackwardAll(const TensorList& grads) final { return Backward(grads[0]); }
};

// True when some input requires grad and grad mode is on (grad_mode.h).
bool AnyRequiresGrad(std::initializer_list<const Variable*> inputs);
// Throws TensorError("<op>: an input Variable is undefined").
void CheckDefined(const char* op, std::initializer_list<const Variable*> inputs);

// Builds the node (only when some input requires grad) and connects it.
template <typename NodeT, typename... Args>
std::shared_ptr<NodeT> MakeNode(std::initializer_list<const Variable*> inputs, Args&&... args) {
  if (!AnyRequiresGrad(inputs)) return nullptr;
  auto node = std::make_shared<NodeT>(std::forward<Args>(args)...);
  node->Connect(inputs);
  return node;
}

// Wraps `result`: output 0 of `node` when some input requires grad, else a
// plain leaf (no node was built, nothing is saved).
template <typename NodeT>
Variable Wrap(Tensor result, std::shared_ptr<NodeT> node) {
  if (!node) return Variable(std::move(result), false);
  return Variable::FromFunction(std::move(result), std::move(node));
}

// Several outputs of one node (output i = results[i]).
std::vector<Variable> WrapOutputs(std::vector<Tensor> results, std::shared_ptr<Node> node);

}  // namespace psync::autograd
