// Node: one backward function in the autograd graph.
//
// Every node gets a sequence number at creation from a thread-local counter
// (increasing), and a priority. The engine's ready queue runs the node with
// the highest (priority, sequence_nr) first. AccumulateGrad nodes carry
// kAccumulateGradPriority so a leaf's gradient is accumulated as soon as it
// is computed (see engine.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "psync/tensor/tensor.h"

namespace psync::autograd {

class Node;

// An input of a node's backward: gradient flows to `function`'s input slot
// `input_nr`. A null function means "no gradient needed".
struct Edge {
  std::shared_ptr<Node> function;
  uint32_t input_nr = 0;
  bool valid() const { return function != nullptr; }
};

using TensorList = std::vector<Tensor>;

// Thrown by Apply on a node whose saved tensors were released by an earlier
// backward without retain_graph. The engine reports it as FailedPrecondition
// naming the node.
class GraphFreedError : public TensorError {
 public:
  explicit GraphFreedError(const std::string& what) : TensorError(absl::StatusCode::kFailedPrecondition, what) {}
};

constexpr int kDefaultPriority = 0;
constexpr int kAccumulateGradPriority = 1 << 30;

// Returns the next sequence number of the calling thread (0, 1, 2, ...).
uint64_t NextSequenceNr();

class Node : public std::enable_shared_from_this<Node> {
 public:
  // Pre-hooks see (and may replace) the gradients flowing into the node.
  using PreHook = std::function<TensorList(const TensorList& grad_inputs)>;
  // Post-hooks run after the node; they see its inputs and outputs:
  // grad_outputs = what Apply returned (one per next edge; empty for
  // AccumulateGrad), grad_inputs = what Apply received (after pre-hooks).
  using PostHook = std::function<void(const TensorList& grad_outputs, const TensorList& grad_inputs)>;

  explicit Node(int priority = kDefaultPriority);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Computes gradients for next_edges() from the gradients of this node's
  // outputs (`grads`, one per output; undefined when an output got none).
  virtual TensorList Apply(TensorList&& grads) = 0;
  virtual std::string name() const = 0;
  // Drops saved tensors after a backward without retain_graph. A later
  // Apply on a released node must throw TensorError("... graph freed ...").
  virtual void ReleaseVariables() {}

  uint64_t sequence_nr() const { return sequence_nr_; }
  int priority() const { return priority_; }
  uint32_t num_outputs() const { return num_outputs_; }
  void set_num_outputs(uint32_t n) { num_outputs_ = n; }

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void add_next_edge(Edge e) { next_edges_.push_back(std::move(e)); }

  // Hooks stay attached for the node's lifetime. Returned ids remove them.
  int AddPreHook(PreHook hook);
  int AddPostHook(PostHook hook);
  void RemovePostHook(int id);
  void RemovePreHook(int id);
  const std::vector<std::pair<int, PreHook>>& pre_hooks() const { return pre_hooks_; }
  const std::vector<std::pair<int, PostHook>>& post_hooks() const { return post_hooks_; }

 private:
  const uint64_t sequence_nr_;
  const int priority_;
  uint32_t num_outputs_ = 1;
  std::vector<Edge> next_edges_;
  int next_hook_id_ = 0;
  std::vector<std::pair<int, PreHook>> pre_hooks_;
  std::vector<std::pair<int, PostHook>> post_hooks_;
};

}  // namespace psync::autograd
