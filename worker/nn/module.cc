#include "psync/nn/module.h"

#include "psync/common/logging.h"
#include "psync/nn/precision.h"
#include "psync/tensor/ops.h"

namespace psync::nn {

Parameter Module::RegisterParameter(const std::string& name, Tensor data) {
  for (const auto& [existing, unused] : params_) {
    PSYNC_CHECK(existing != name) << "parameter '" << name << "' registered twice";
  }
  Parameter p(std::move(data), name);
  params_.emplace_back(name, p);
  return p;
}

void Module::AddChild(const std::string& name, std::shared_ptr<Module> child) {
  PSYNC_CHECK(child != nullptr) << "child module '" << name << "' is null";
  for (const auto& [existing, unused] : children_) {
    PSYNC_CHECK(existing != name) << "child module '" << name << "' registered twice";
  }
  child->PrefixNames(name + ".");
  children_.emplace_back(name, std::move(child));
}

void Module::PrefixNames(const std::string& prefix) {
  // Only the Variables' display names change; the registry keeps local
  // names and builds dotted ones in named_parameters().
  for (auto& [local, var] : params_) var.set_name(prefix + var.name());
  for (auto& [local, child] : children_) child->PrefixNames(prefix);
}

void Module::CollectNamed(const std::string& prefix, std::vector<std::pair<std::string, Variable>>* out) const {
  for (const auto& [local, var] : params_) out->emplace_back(prefix + local, var);
  for (const auto& [local, child] : children_) child->CollectNamed(prefix + local + ".", out);
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  CollectNamed("", &out);
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& [name, var] : named_parameters()) out.push_back(var);
  return out;
}

Variable Module::operator()(const Variable& x) {
  if (!hooks_) return Forward(x);
  ForwardScope scope(*this);
  return scope.Done({Forward(x)});
}

void Module::SetForwardHooks(std::shared_ptr<ForwardHooks> hooks) {
  for (auto& [name, child] : children_) child->SetForwardHooks(hooks);
  hooks_ = std::move(hooks);
}

ForwardScope::ForwardScope(const Module& module) : module_(module), hooks_(module.forward_hooks().get()) {
  if (hooks_) hooks_->BeforeForward(module_);
}

ForwardScope::~ForwardScope() {
  if (!hooks_ || done_) return;
  // Why swallow: this runs while an exception unwinds; the hooks' contract
  // is not to throw here, and a second exception would terminate.
  try {
    hooks_->AfterForward(module_, {});
  } catch (...) {
  }
}

Variable ForwardScope::Done(std::vector<Variable> outputs) {
  if (hooks_ && !done_) {
    done_ = true;
    hooks_->AfterForward(module_, outputs);
  }
  return outputs.empty() ? Variable() : outputs.front();
}

const PrecisionPolicy& Module::precision() const { return precision_ ? *precision_ : PrecisionPolicy::Fp32(); }

void Module::SetPrecision(std::shared_ptr<const PrecisionPolicy> policy) {
  for (auto& [name, child] : children_) child->SetPrecision(policy);
  precision_ = std::move(policy);
}

void Module::ZeroGrad(bool set_to_none) {
  for (const Variable& p : parameters()) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      Tensor g = p.grad();
      ops::Fill(g, 0.0f);
    }
  }
}

}  // namespace psync::nn
