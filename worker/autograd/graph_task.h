// GraphTask: the bookkeeping of one Engine::Backward call: how many
// gradients each reachable node still waits for, the gradients received so
// far (summed per input slot), the ready queue, and the queued callbacks.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "psync/autograd/node.h"
#include "worker/autograd/ready_queue.h"

namespace psync::autograd {

class GraphTask {
 public:
  GraphTask(bool retain_graph, bool use_priority) : retain_graph_(retain_graph), ready_(use_priority) {}
  GraphTask(const GraphTask&) = delete;
  GraphTask& operator=(const GraphTask&) = delete;

  // Step 1: walks every node reachable from `roots` and counts the edges
  // that point at it among reachable nodes (its dependencies).
  void Discover(const std::vector<Edge>& roots);

  // Seeds a root's gradient (not a dependency). Call Discover first, then
  // seed every root, then ScheduleRoots.
  void SeedRoot(const Edge& root, Tensor grad);
  // Queues every seeded root that waits for no other node.
  void ScheduleRoots();

  // A node produced `grad` for `edge`: sums it into the slot and queues the
  // target once all its dependencies are in. Throws TensorError when two
  // gradients for one slot cannot be added (shape mismatch).
  void Deliver(const Edge& edge, Tensor grad);

  // The gradients collected for `node`, one per output slot; moved out so
  // the node can steal them.
  TensorList TakeInputs(Node* node);

  ReadyQueue& ready() { return ready_; }
  bool retain_graph() const { return retain_graph_; }
  std::vector<std::function<absl::Status()>>& callbacks() { return callbacks_; }

 private:
  struct NodeState {
    int dependencies = 0;  // gradients still to arrive from other nodes
    bool queued = false;
    TensorList inputs;     // sized to num_outputs on first gradient
  };
  void Accumulate(NodeState& state, const Edge& edge, Tensor grad);

  const bool retain_graph_;
  ReadyQueue ready_;
  std::unordered_map<Node*, NodeState> nodes_;
  std::vector<std::shared_ptr<Node>> roots_;  // seeded, in seeding order
  std::vector<std::function<absl::Status()>> callbacks_;
};

}  // namespace psync::autograd
