#include "worker/autograd/accumulate_grad.h"

#include "psync/tensor/ops.h"

namespace psync::autograd {

AccumulateGrad::AccumulateGrad(std::weak_ptr<VariableState> variable)
    : Node(kAccumulateGradPriority), variable_(std::move(variable)) {}

Variable AccumulateGrad::variable() const {
  std::shared_ptr<VariableState> state = variable_.lock();
  return state ? Variable(std::move(state)) : Variable();
}

std::string AccumulateGrad::name() const {
  std::shared_ptr<VariableState> state = variable_.lock();
  if (!state) return "AccumulateGrad(<freed leaf>)";
  return "AccumulateGrad(" + (state->name.empty() ? std::string("<unnamed>") : state->name) + ")";
}

void AccumulateGrad::SetGradDestination(Tensor destination) {
  destination_ = std::move(destination);
  destination_taken_ = false;
}

Tensor AccumulateGrad::TakeGradDestination(const Shape& shape, Device device) {
  if (!destination_.defined() || destination_taken_) return Tensor();
  if (destination_.shape() != shape || destination_.device() != device) return Tensor();
  std::shared_ptr<VariableState> state = variable_.lock();
  if (!state || state->grad.defined()) return Tensor();
  destination_taken_ = true;
  return destination_;
}

TensorList AccumulateGrad::Apply(TensorList&& grads) {
  // A destination handed out for this gradient is free again afterwards.
  destination_taken_ = false;
  std::shared_ptr<VariableState> state = variable_.lock();
  // A leaf that is gone, or an output that got no gradient: nothing to add.
  if (!state || grads.empty() || !grads[0].defined()) return {};
  Tensor incoming = std::move(grads[0]);
  if (incoming.shape() != state->data.shape() || incoming.dtype() != state->data.dtype()) {
    throw TensorError("gradient " + incoming.DebugString() + " for " + name() + " whose data is " +
                      state->data.DebugString());
  }
  // A strided gradient (e.g. through a transpose) becomes a fresh contiguous
  // copy: grads are contiguous, so they can be views into buckets and be
  // accumulated into in place.
  if (!incoming.is_contiguous()) incoming = incoming.Contiguous();
  if (!state->grad.defined() && destination_.defined() && incoming.IsSameView(destination_)) {
    // The producer wrote the gradient into the destination: adopt it.
    state->grad = std::move(incoming);
  } else if (!state->grad.defined()) {
    // Steal the buffer only when nobody else can see it. Otherwise the
    // incoming tensor may alias another variable's data or a saved tensor,
    // and a later in-place accumulation into grad would corrupt it, so take
    // a private copy. The engine holds one extra handle while post-hooks
    // exist (they get to see the inputs), so that one is expected.
    const long expected_refs = 1 + (post_hooks().empty() ? 0 : 1);
    if (incoming.storage().use_count() <= expected_refs) {
      state->grad = std::move(incoming);
    } else {
      state->grad = incoming.Clone();
    }
  } else {
    // In place, so a grad that is a view into a reducer bucket stays one.
    ops::AddInPlace(state->grad, incoming);
  }
  return {};
}

}  // namespace psync::autograd
