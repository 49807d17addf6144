// Engine: runs backward over the graph with a prioritized ready queue.
//
// State machine of one Backward() call (single-threaded, on the caller's
// thread; CUDA kernels it launches are asynchronous on the compute stream):
//   0. Validate: every root is defined and requires grad; seeds are given
//      or the root has one element (seeded with 1). Otherwise
//      InvalidArgument, and nothing runs.
//   1. Discover: walk from the roots, count for every reachable node how many
//      gradients it must receive (dependencies).
//   2. Run: the ready queue holds nodes whose dependencies are all in. It
//      pops the highest (priority, sequence_nr) first: AccumulateGrad
//      (highest priority) runs as soon as its gradient exists, and among
//      ordinary nodes the most recently created runs first. Each node runs
//      observer(begin), pre-hooks, Apply, post-hooks, observer(end); without
//      retain_graph it then releases its saved tensors (so memory is freed
//      as backward goes, and a second backward through it fails with
//      FailedPrecondition "... call backward with retain_graph=true ...").
//      Its gradients go to its next edges; gradients for the same input slot
//      are summed. A node runs even when all its gradients are undefined
//      (so AccumulateGrad's post-hooks fire for every reachable leaf).
//   3. Finish: callbacks queued with QueueCallback during this backward run
//      in order, including ones queued by callbacks (the reducer's finalize
//      is one). All of them run; the first error becomes Backward's result.
//   On an error in step 2 (a node or hook threw, or returned the wrong
//   number of gradients) Backward stops at once, returns a Status naming the
//   node, and does NOT run the queued callbacks (the pass is incomplete).
//
// Exceptions thrown by nodes, hooks and callbacks never escape Backward:
// psync::TensorError -> InvalidArgument (GraphFreedError ->
// FailedPrecondition), psync::InternalError -> Internal, others -> Unknown.
//
// Threads: the process-wide engine may be used by several threads at once
// (ranks as threads in tests). Each Backward's state, and QueueCallback /
// InBackward, belong to the calling thread. The priority switch and the
// node observer are process-wide.
//
// With priorities disabled (SetPrioritiesEnabled(false), for tests and
// benchmarks only) the queue orders by sequence_nr alone, as a plain
// topological engine would; then on a second iteration the long-lived
// AccumulateGrad nodes are older than every new node and run last.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "psync/autograd/variable.h"

namespace psync::autograd {

class AccumulateGrad;

class Engine {
 public:
  // Called around every node execution: (node, true) before its pre-hooks,
  // (node, false) after its post-hooks (also when it failed). Runs on the
  // thread calling Backward, so it must be thread-safe when several threads
  // run backward. For tests (execution order) and tracing (the runtime
  // writes a Chrome trace span per AccumulateGrad).
  using NodeObserver = std::function<void(const Node& node, bool begin)>;

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

  // Installs (or, with nullptr, removes) the node observer. Backward calls
  // already running keep the observer they started with.
  void SetNodeObserver(NodeObserver observer);

 private:
  std::atomic<bool> priorities_enabled_{true};
  mutable std::mutex observer_mu_;
  std::shared_ptr<const NodeObserver> observer_;  // guarded by observer_mu_
};

// RAII: sets the priority switch and restores the previous value (tests).
class ScopedPriorities {
 public:
  explicit ScopedPriorities(bool enabled) : previous_(Engine::Get().PrioritiesEnabled()) {
    Engine::Get().SetPrioritiesEnabled(enabled);
  }
  ~ScopedPriorities() { Engine::Get().SetPrioritiesEnabled(previous_); }
  ScopedPriorities(const ScopedPriorities&) = delete;
  ScopedPriorities& operator=(const ScopedPriorities&) = delete;

 private:
  bool previous_;
};

// Convenience: Engine::Get().Backward({root}, {}, retain_graph).
absl::Status Backward(const Variable& root, bool retain_graph = false);

// All AccumulateGrad nodes reachable from `outputs` through grad_fn edges,
// in discovery order (for find_unused_parameters). An output that is itself
// a leaf requiring grad contributes its own accumulator.
std::vector<std::shared_ptr<AccumulateGrad>> ReachableAccumulators(const std::vector<Variable>& outputs);

}  // namespace psync::autograd
