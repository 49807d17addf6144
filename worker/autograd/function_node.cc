#include "psync/autograd/function_node.h"

#include "worker/autograd/accumulate_grad.h"
#include "psync/autograd/grad_mode.h"

namespace psync::autograd {

TensorList FunctionNode::Apply(TensorList&& grads) {
  if (released_) {
    throw GraphFreedError(name_ +
                          ": its saved tensors were freed by an earlier backward (graph freed); call backward "
                          "with retain_graph=true to run backward through the same graph twice");
  }
  TensorList out;
  out.reserve(next_edges().size());
  bool any = false;
  for (const Tensor& g : grads) any = any || g.defined();
  if (!any) {
    out.resize(next_edges().size());  // nothing flows in, nothing flows out
    return out;
  }
  grads.resize(num_outputs());
  TensorList per_input = BackwardAll(grads);
  for (size_t i = 0; i < needs_grad_.size(); ++i) {
    if (needs_grad_[i]) out.push_back(std::move(per_input[i]));
  }
  return out;
}

void FunctionNode::ReleaseVariables() {
  if (!saves_tensors_) return;  // nothing to free: a second backward is fine
  released_ = true;
  ReleaseSaved();
}

void FunctionNode::Connect(std::initializer_list<const Variable*> inputs) {
  Connect(std::vector<const Variable*>(inputs));
}

void FunctionNode::Connect(const std::vector<const Variable*>& inputs) {
  for (const Variable* v : inputs) {
    const bool needs = v != nullptr && v->requires_grad();
    needs_grad_.push_back(needs);
    if (needs) add_next_edge(v->gradient_edge());
  }
}

Tensor FunctionNode::OutputBuffer(size_t input, const Shape& shape, Device device) const {
  if (!needs_grad_[input]) return Tensor();
  size_t edge = 0;
  for (size_t i = 0; i < input; ++i) edge += needs_grad_[i] ? 1 : 0;
  const Edge& e = next_edges()[edge];
  if (!e.valid() || e.function->priority() != kAccumulateGradPriority) return Tensor();
  auto* acc = dynamic_cast<AccumulateGrad*>(e.function.get());
  return acc ? acc->TakeGradDestination(shape, device) : Tensor();
}

Tensor FunctionNode::WeightGradBuffer(size_t input, const Shape& shape, DType dtype, Device device) const {
  Tensor out = OutputBuffer(input, shape, device);
  if (out.defined() && out.dtype() == dtype) return out;
  return Tensor::Empty(shape, dtype, device);
}

namespace {
thread_local bool grad_enabled = true;
}  // namespace

bool GradMode::enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

bool AnyRequiresGrad(std::initializer_list<const Variable*> inputs) {
  if (!GradMode::enabled()) return false;  // no_grad: build no node
  for (const Variable* v : inputs) {
    if (v != nullptr && v->requires_grad()) return true;
  }
  return false;
}

void CheckDefined(const char* op, std::initializer_list<const Variable*> inputs) {
  for (const Variable* v : inputs) {
    if (v == nullptr || !v->defined()) throw TensorError(std::string(op) + ": an input Variable is undefined");
  }
}

std::vector<Variable> WrapOutputs(std::vector<Tensor> results, std::shared_ptr<Node> node) {
  std::vector<Variable> out;
  out.reserve(results.size());
  if (node) node->set_num_outputs(static_cast<uint32_t>(results.size()));
  for (size_t i = 0; i < results.size(); ++i) {
    out.push_back(node ? Variable::FromFunction(std::move(results[i]), node, static_cast<uint32_t>(i))
                       : Variable(std::move(results[i]), false));
  }
  return out;
}

}  // namespace psync::autograd
