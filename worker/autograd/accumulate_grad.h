// AccumulateGrad: the sink node of a leaf. Adds the incoming gradient into
// the leaf's grad (grad = incoming when undefined; grad += incoming in place
// otherwise, so a grad that is a view into a reducer bucket stays one).
#pragma once

#include <memory>

#include "worker/autograd/node.h"
#include "worker/autograd/variable.h"

namespace psync::autograd {

class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<VariableState> variable);
  TensorList Apply(TensorList&& grads) override;
  std::string name() const override;  // "AccumulateGrad(<param name>)"
  // The leaf this node accumulates into (null once the leaf is gone).
  Variable variable() const;

 private:
  std::weak_ptr<VariableState> variable_;
};

}  // namespace psync::autograd
