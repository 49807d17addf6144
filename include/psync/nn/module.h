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

class Module;

// Forward hooks, like torch's register_forward_pre_hook and
// register_forward_hook, one set per module tree (Module::SetForwardHooks).
// Module::operator() and ForwardScope call them around every module's
// computation; ZeRO-3 (--zero=3) gathers a module's parameters with them.
// They run on the thread that runs forward.
class ForwardHooks {
 public:
  virtual ~ForwardHooks() = default;
  // `module` is about to compute: the parameters of it and of its
  // descendants may be read until AfterForward. Errors throw (the forward
  // fails with them).
  virtual void BeforeForward(const Module& module) = 0;
  // `module` computed `outputs` (empty when its forward threw): the outputs
  // backward reaches the module's computation through. Must not throw when
  // `outputs` is empty.
  virtual void AfterForward(const Module& module, const std::vector<Variable>& outputs) = 0;
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The module's computation on one input. Errors throw psync::TensorError.
  virtual Variable Forward(const Variable& x) = 0;
  // Forward between the forward hooks: how a module calls its children
  // (a parent that reads a child's parameters any other way opens a
  // ForwardScope on the child). Without hooks it is Forward.
  Variable operator()(const Variable& x);

  // The hooks of this module and every descendant (null: none), like
  // SetPrecision. A module added later does not inherit them.
  void SetForwardHooks(std::shared_ptr<ForwardHooks> hooks);
  const std::shared_ptr<ForwardHooks>& forward_hooks() const { return hooks_; }

  // (dotted name, parameter) in registration order.
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  std::vector<Variable> parameters() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  // (local name, parameter) this module registered itself, not its children's.
  const std::vector<std::pair<std::string, Variable>>& own_parameters() const { return params_; }

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
  std::shared_ptr<ForwardHooks> hooks_;               // null: none
};

// The forward hooks around a computation that reads `module`'s parameters
// without calling its Forward (a fused op over several layers, a tied
// weight): BeforeForward on construction; Done(outputs) runs AfterForward
// with the outputs; a scope left without Done (an exception) runs it with
// none. Without hooks it does nothing.
//
//   ForwardScope scope(*block);
//   auto [h, m] = FusedComputation(block->weights..., x);
//   scope.Done({h, m});
class ForwardScope {
 public:
  explicit ForwardScope(const Module& module);
  ~ForwardScope();
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;
  // Runs AfterForward (once); returns outputs.front() for `return scope.Done({y});`.
  Variable Done(std::vector<Variable> outputs);

 private:
  const Module& module_;
  ForwardHooks* hooks_;  // the module's, or null
  bool done_ = false;
};

}  // namespace psync::nn
