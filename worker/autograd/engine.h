// Engine: runs backward over the graph with a prioritized ready queue.
//
// State machine of one Backward() call (single-threaded, on the caller's
// thread; CUDA kernels it launches are asynchronous on the compute stream):
//   1. Discover: walk from the roots, count for every reachable node how many
//      gradients it must receive (dependencies).
//   2. Run: the ready queue holds nodes whose dependencies are all in. It
//      pops the highest (priority, sequence_nr) first: AccumulateGrad
//      (highest priority) runs as soon as its gradient exists, and among
//      ordinary nodes the most recently created runs first. Each node runs
//      pre-hooks, Apply, post-hooks, then hands gradients to its next edges.
//   3. Finish: callbacks queued with QueueCallback during this backward run
//      in order (the reducer's finalize is one). Their first error becomes
//      Backward's result.
//   4. Without retain_graph, every executed node releases its saved tensors.
//
// With priorities disabled (SetPrioritiesEnabled(false), for tests and
// benchmarks only) the queue orders by sequence_nr alone, as a plain
// topological engine would; then on a second iteration the long-lived
// AccumulateGrad nodes are older than every new node and run last.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "worker/autograd/variable.h"

namespace psync::autograd {

class AccumulateGrad;

class Engine {
 public:
  // The process-wide engine.
  static Engine& Get();

  // Runs backward from `roots`. grad_roots[i] seeds roots[i]; when empty,
  // every root must have one element and is seeded with 1. Errors: a root
  // that does not require grad, backward through a freed graph, a throwing
  // node or hook, or a failing callback; the message names the node.
  absl::Status Backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grad_roots = {},
                        bool retain_graph = false);

  // Queues `cb` to run once the current Backward has run every node. Only
  // valid while a backward is running (from a hook); returns
  // FailedPrecondition otherwise.
  absl::Status QueueCallback(std::function<absl::Status()> cb);
  bool InBackward() const;

  void SetPrioritiesEnabled(bool enabled);
  bool PrioritiesEnabled() const;
};

// All AccumulateGrad nodes reachable from `outputs` through grad_fn edges,
// in discovery order (for find_unused_parameters).
std::vector<std::shared_ptr<AccumulateGrad>> ReachableAccumulators(const std::vector<Variable>& outputs);

}  // namespace psync::autograd
