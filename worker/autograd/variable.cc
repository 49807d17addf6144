#include "psync/autograd/variable.h"

#include "worker/autograd/accumulate_grad.h"

namespace psync::autograd {

Variable::Variable(Tensor data, bool requires_grad, std::string name)
    : state_(std::make_shared<VariableState>()) {
  state_->data = std::move(data);
  state_->requires_grad = requires_grad;
  state_->name = std::move(name);
}

Variable Variable::FromFunction(Tensor data, std::shared_ptr<Node> grad_fn, uint32_t output_nr) {
  auto state = std::make_shared<VariableState>();
  state->data = std::move(data);
  // A result with a grad_fn is part of a graph, so it requires grad; results
  // of ops whose inputs need no grad are built as plain leaves instead.
  state->requires_grad = grad_fn != nullptr;
  state->grad_fn = std::move(grad_fn);
  state->output_nr = output_nr;
  return Variable(std::move(state));
}

std::shared_ptr<AccumulateGrad> Variable::grad_accumulator() const {
  if (!state_ || !state_->requires_grad || state_->grad_fn != nullptr) return nullptr;
  if (!state_->grad_accumulator) {
    // Created once and kept for the leaf's lifetime: its sequence number and
    // its hooks (the reducer's) then stay the same on every iteration. The
    // node holds the leaf weakly, so there is no ownership cycle.
    state_->grad_accumulator = std::make_shared<AccumulateGrad>(state_);
  }
  return state_->grad_accumulator;
}

Edge Variable::gradient_edge() const {
  if (!state_) return Edge{};
  if (state_->grad_fn) return Edge{state_->grad_fn, state_->output_nr};
  if (state_->requires_grad) return Edge{grad_accumulator(), 0};
  return Edge{};
}

}  // namespace psync::autograd
