#include "worker/autograd/graph_task.h"

#include <string>
#include <unordered_set>

#include "psync/common/logging.h"
#include "psync/tensor/ops.h"

namespace psync::autograd {

void GraphTask::Discover(const std::vector<Edge>& roots) {
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const Edge& root : roots) {
    if (root.valid() && seen.insert(root.function.get()).second) stack.push_back(root.function.get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    nodes_[node];  // every reachable node gets an entry, even with no dependencies
    for (const Edge& next : node->next_edges()) {
      if (!next.valid()) continue;
      nodes_[next.function.get()].dependencies++;
      if (seen.insert(next.function.get()).second) stack.push_back(next.function.get());
    }
  }
}

void GraphTask::Accumulate(NodeState& state, const Edge& edge, Tensor grad) {
  const uint32_t slots = edge.function->num_outputs();
  PSYNC_CHECK(edge.input_nr < slots) << "edge into " << edge.function->name() << " slot " << edge.input_nr
                                     << " but the node has " << slots << " outputs";
  if (state.inputs.empty()) state.inputs.resize(slots);
  Tensor& slot = state.inputs[edge.input_nr];
  if (!grad.defined()) return;
  if (!slot.defined()) {
    slot = std::move(grad);
  } else {
    // Out of place: either tensor may be referenced elsewhere (a saved
    // tensor, a user's grad_root), so neither is modified.
    slot = ops::Add(slot, grad);
  }
}

void GraphTask::SeedRoot(const Edge& root, Tensor grad) {
  NodeState& state = nodes_[root.function.get()];
  Accumulate(state, root, std::move(grad));
  roots_.push_back(root.function);
}

void GraphTask::ScheduleRoots() {
  for (const std::shared_ptr<Node>& root : roots_) {
    NodeState& state = nodes_[root.get()];
    if (state.dependencies == 0 && !state.queued) {
      state.queued = true;
      ready_.Push(root);
    }
  }
  roots_.clear();
}

void GraphTask::Deliver(const Edge& edge, Tensor grad) {
  auto it = nodes_.find(edge.function.get());
  PSYNC_CHECK(it != nodes_.end()) << edge.function->name() << " was not discovered";
  NodeState& state = it->second;
  Accumulate(state, edge, std::move(grad));
  PSYNC_CHECK(state.dependencies > 0) << edge.function->name() << " got more gradients than it has dependencies";
  if (--state.dependencies == 0 && !state.queued) {
    state.queued = true;
    ready_.Push(edge.function);
  }
}

TensorList GraphTask::TakeInputs(Node* node) {
  NodeState& state = nodes_[node];
  TensorList inputs = std::move(state.inputs);
  inputs.resize(node->num_outputs());  // a node reached only by undefined gradients
  state.inputs.clear();
  return inputs;
}

}  // namespace psync::autograd
