// Module: a tree of named parameters, like torch.nn.Module.
//
// Parameters are leaf Variables that require grad. A module registers its
// own parameters and its child modules; named_parameters() lists them in
// registration order (own parameters first, then each child's, depth
// first) with dotted names ("layers.0.weight"). The Variable's own name()
// is kept equal to that dotted name (RegisterModule prefixes the child's
// names), so engine and reducer error messages name parameters the same way.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "psync/autograd/variable.h"

namespace psync::nn {

using autograd::Variable;
class PrecisionPolicy;  // nn/precision.h

// A named leaf Variable requiring grad. Copies share state with the
// original (it is a Variable handle; slicing to Variable loses nothing).
class Parameter : public Variable {
 public:
  Parameter() = default;
  Parameter(Tensor data, std::string name) : Variable(std::move(data), /*requires_grad=*/true, std::move(name)) {}
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The module's computation on one input. Errors throw psync::TensorError.
  virtual Variable Forward(const Variable& x) = 0;

  // (dotted name, parameter) in registration order.
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  std::vector<Variable> parameters() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  // Clears every parameter's grad (set_to_none), or fills defined grads
  // with zero in place (so grads that are views into buckets stay views).
  void ZeroGrad(bool set_to_none = true);

  // How this module computes (nn/precision.h): PrecisionPolicy::Fp32()
  // until SetPrecision, which sets it on this module and every descendant.
  const PrecisionPolicy& precision() const;
  void SetPrecision(std::shared_ptr<const PrecisionPolicy> policy);

 protected:
  // Registers a new parameter `name` holding `data`; returns it.
  Parameter RegisterParameter(const std::string& name, Tensor data);
  // Registers a child; its parameter names get the prefix "<name>.".
  template <typename M>
  std::shared_ptr<M> RegisterModule(const std::string& name, std::shared_ptr<M> child) {
    AddChild(name, child);
    return child;
  }

 private:
  void AddChild(const std::string& name, std::shared_ptr<Module> child);
  void PrefixNames(const std::string& prefix);
  void CollectNamed(const std::string& prefix, std::vector<std::pair<std::string, Variable>>* out) const;

  std::vector<std::pair<std::string, Variable>> params_;  // local names
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::shared_ptr<const PrecisionPolicy> precision_;  // null: fp32
};

}  // namespace psync::nn
