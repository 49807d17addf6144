// AccumulateGrad: the sink node of a leaf. Adds the incoming gradient into
// the leaf's grad (grad = incoming when undefined; grad += incoming in place
// otherwise, so a grad that is a view into a reducer bucket stays one).
//
// Gradient destination (gradient_as_bucket_view without copies): an owner
// of the leaf (the DDP reducer) may name a tensor the leaf's gradient should
// live in (its bucket slot). While the leaf's grad is undefined, the node
// that computes the gradient may ask for it (TakeGradDestination) and write
// the gradient straight into it (e.g. MatmulInto); Apply then adopts it as
// grad without a copy. It is handed out at most once per Apply, so two
// producers of one leaf's gradient never write into the same memory (the
// second computes a fresh tensor and the engine sums them as usual).
#pragma once

#include <memory>

#include "psync/autograd/node.h"
#include "psync/autograd/variable.h"

namespace psync::autograd {

class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<VariableState> variable);
  TensorList Apply(TensorList&& grads) override;
  std::string name() const override;  // "AccumulateGrad(<param name>)"
  // The leaf this node accumulates into (null once the leaf is gone).
  Variable variable() const;

  // Sets (undefined: clears) the gradient destination. Same shape and
  // device as the leaf's data. Backward thread / between backwards only.
  void SetGradDestination(Tensor destination);
  const Tensor& grad_destination() const { return destination_; }
  // The destination, when the leaf's grad is undefined, it was not handed
  // out since the last Apply, and it matches `shape` and `device`; else an
  // undefined tensor. Called by the producing node during backward.
  Tensor TakeGradDestination(const Shape& shape, Device device);

 private:
  std::weak_ptr<VariableState> variable_;
  Tensor destination_;
  bool destination_taken_ = false;
};

}  // namespace psync::autograd
