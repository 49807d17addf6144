// Variable: a Tensor plus autograd state (requires_grad, grad, grad_fn).
//
// A Variable is a shared handle: copies refer to the same state, like a
// torch.Tensor. Leaves that require grad own exactly one AccumulateGrad
// node, created on first use and kept for the leaf's lifetime, so hooks
// attached to it stay attached across iterations.
#pragma once

#include <memory>
#include <string>

#include "psync/autograd/node.h"
#include "psync/tensor/tensor.h"

namespace psync::autograd {

class AccumulateGrad;

struct VariableState {
  Tensor data;
  Tensor grad;                      // undefined until the first backward reaches the leaf
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;    // null for leaves
  uint32_t output_nr = 0;           // which output of grad_fn this is
  std::shared_ptr<AccumulateGrad> grad_accumulator;  // leaves only, created once
  std::string name;                 // parameter name, for error messages
};

class Variable {
 public:
  Variable() = default;  // undefined
  // A leaf. `name` appears in error messages (parameter names).
  explicit Variable(Tensor data, bool requires_grad = false, std::string name = "");
  // A non-leaf: output `output_nr` of `grad_fn`.
  static Variable FromFunction(Tensor data, std::shared_ptr<Node> grad_fn, uint32_t output_nr = 0);
  explicit Variable(std::shared_ptr<VariableState> state) : state_(std::move(state)) {}

  bool defined() const { return state_ != nullptr; }
  const Tensor& data() const { return state_->data; }
  Tensor& mutable_data() const { return state_->data; }
  const Shape& shape() const { return state_->data.shape(); }
  const Tensor& grad() const { return state_->grad; }
  void set_grad(Tensor g) const { state_->grad = std::move(g); }
  bool requires_grad() const { return state_ && state_->requires_grad; }
  bool is_leaf() const { return state_->grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return state_->grad_fn; }
  uint32_t output_nr() const { return state_->output_nr; }
  const std::string& name() const { return state_->name; }
  void set_name(std::string n) const { state_->name = std::move(n); }

  // The leaf's AccumulateGrad (created on first call, then the same node).
  // Null for non-leaves and leaves without requires_grad.
  std::shared_ptr<AccumulateGrad> grad_accumulator() const;
  // Where a gradient for this variable goes: (grad_fn, output_nr) for
  // non-leaves, (AccumulateGrad, 0) for leaves requiring grad, else invalid.
  Edge gradient_edge() const;

  // Same underlying state (identity, not value equality).
  bool is_same(const Variable& o) const { return state_ == o.state_; }
  const std::shared_ptr<VariableState>& state() const { return state_; }

 private:
  std::shared_ptr<VariableState> state_;
};

}  // namespace psync::autograd
