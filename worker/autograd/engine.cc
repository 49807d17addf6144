#include "psync/autograd/engine.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "psync/common/logging.h"
#include "psync/common/status_from_exception.h"
#include "worker/autograd/accumulate_grad.h"
#include "worker/autograd/graph_task.h"

namespace psync::autograd {
namespace {

// The GraphTask of the Backward running on this thread (innermost when a
// hook calls Backward again), for QueueCallback and InBackward.
thread_local GraphTask* current_task = nullptr;

class CurrentTaskScope {
 public:
  explicit CurrentTaskScope(GraphTask* task) : previous_(current_task) { current_task = task; }
  ~CurrentTaskScope() { current_task = previous_; }
  CurrentTaskScope(const CurrentTaskScope&) = delete;
  CurrentTaskScope& operator=(const CurrentTaskScope&) = delete;

 private:
  GraphTask* previous_;
};

std::string Describe(const Node& node) {
  return absl::StrCat(node.name(), " (sequence_nr ", node.sequence_nr(), ")");
}

// Runs node, hook and callback code; what it throws becomes a Status
// prefixed with `where` (include/psync/common/status_from_exception.h; an exception that
// names no code is Unknown).
template <typename Fn>
absl::Status Guarded(const std::string& where, Fn&& fn) {
  return RunCatching(where, std::forward<Fn>(fn), absl::StatusCode::kUnknown);
}

// Step 2 for one node: observer, pre-hooks, Apply, post-hooks, observer.
absl::Status RunNode(Node& node, TensorList inputs, const Engine::NodeObserver* observer, TensorList* outputs) {
  const std::string where = absl::StrCat("backward of ", Describe(node));
  absl::Status status = Guarded(where, [&] {
    if (observer) (*observer)(node, true);
    // Copies of the hook lists: a hook may add or remove hooks.
    const auto pre_hooks = node.pre_hooks();
    for (const auto& [id, hook] : pre_hooks) {
      const size_t n = inputs.size();
      inputs = hook(inputs);
      PSYNC_CHECK(inputs.size() == n) << "pre-hook " << id << " returned " << inputs.size()
                                      << " gradients instead of " << n;
    }
    // Post-hooks see what Apply received, so keep a copy of the handles
    // only when there are post-hooks (otherwise Apply may steal buffers).
    TensorList kept = node.post_hooks().empty() ? TensorList{} : inputs;
    *outputs = node.Apply(std::move(inputs));
    PSYNC_CHECK(outputs->size() == node.next_edges().size())
        << "Apply returned " << outputs->size() << " gradients for " << node.next_edges().size() << " next edges";
    const auto post_hooks = node.post_hooks();
    for (const auto& entry : post_hooks) entry.second(*outputs, kept);
  });
  if (observer) {
    absl::Status end = Guarded(where + " (node observer)", [&] { (*observer)(node, false); });
    if (status.ok()) status = end;
  }
  return status;
}

absl::Status ValidateRoots(const std::vector<Variable>& roots, const std::vector<Tensor>& grad_roots,
                           std::vector<Edge>* edges, std::vector<Tensor>* seeds) {
  if (roots.empty()) return absl::InvalidArgumentError("Backward: no roots given");
  if (!grad_roots.empty() && grad_roots.size() != roots.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Backward: ", roots.size(), " roots but ", grad_roots.size(),
                                                   " grad_roots; pass one gradient per root or none"));
  }
  for (size_t i = 0; i < roots.size(); ++i) {
    const Variable& root = roots[i];
    if (!root.defined()) return absl::InvalidArgumentError(absl::StrCat("Backward: root ", i, " is undefined"));
    const std::string label =
        absl::StrCat("root ", i, root.name().empty() ? "" : " '" + root.name() + "'", " of shape ",
                     ShapeToString(root.shape()));
    if (!root.requires_grad()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Backward: ", label,
          " does not require grad and has no grad_fn, so there is nothing to differentiate; build it from "
          "variables created with requires_grad=true"));
    }
    Tensor seed;
    if (grad_roots.empty()) {
      if (root.data().numel() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Backward: a gradient can be created implicitly only for single-element roots; ", label,
            " needs an explicit grad_roots entry"));
      }
      seed = Tensor::Full(root.shape(), 1.0, root.data().dtype(), root.data().device());
    } else {
      seed = grad_roots[i];
      if (!seed.defined() || seed.shape() != root.shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Backward: grad_roots[", i, "] has shape ",
            seed.defined() ? ShapeToString(seed.shape()) : std::string("<undefined>"), " but ", label));
      }
    }
    edges->push_back(root.gradient_edge());
    seeds->push_back(std::move(seed));
  }
  return absl::OkStatus();
}

}  // namespace

Engine& Engine::Get() {
  static Engine* engine = new Engine();  // never destroyed: hooks may outlive static teardown order
  return *engine;
}

absl::Status Engine::Backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grad_roots,
                              bool retain_graph) {
  // 0. Validate.
  std::vector<Edge> root_edges;
  std::vector<Tensor> seeds;
  absl::Status status = ValidateRoots(roots, grad_roots, &root_edges, &seeds);
  if (!status.ok()) return status;

  std::shared_ptr<const NodeObserver> observer;
  {
    std::lock_guard<std::mutex> lock(observer_mu_);
    observer = observer_;
  }

  GraphTask task(retain_graph, PrioritiesEnabled());
  CurrentTaskScope scope(&task);

  // 1. Discover, then seed the roots.
  status = Guarded("Backward: seeding the roots", [&] {
    task.Discover(root_edges);
    for (size_t i = 0; i < root_edges.size(); ++i) task.SeedRoot(root_edges[i], std::move(seeds[i]));
    task.ScheduleRoots();
  });
  if (!status.ok()) return status;

  // 2. Run.
  while (!task.ready().empty()) {
    std::shared_ptr<Node> node = task.ready().Pop();
    TensorList outputs;
    status = RunNode(*node, task.TakeInputs(node.get()), observer.get(), &outputs);
    if (!status.ok()) return status;
    if (!retain_graph) node->ReleaseVariables();
    const std::vector<Edge>& edges = node->next_edges();
    status = Guarded(absl::StrCat("backward: passing the gradients of ", Describe(*node)), [&] {
      for (size_t i = 0; i < edges.size(); ++i) {
        if (edges[i].valid()) task.Deliver(edges[i], std::move(outputs[i]));
      }
    });
    if (!status.ok()) return status;
  }

  // 3. Finish. Index loop: a callback may queue more callbacks.
  absl::Status first_error;
  for (size_t i = 0; i < task.callbacks().size(); ++i) {
    std::function<absl::Status()> cb = std::move(task.callbacks()[i]);
    absl::Status cb_status;
    absl::Status thrown = Guarded(absl::StrCat("backward: final callback ", i), [&] { cb_status = cb(); });
    if (!thrown.ok()) cb_status = thrown;
    if (!cb_status.ok() && first_error.ok()) first_error = cb_status;
  }
  return first_error;
}

absl::Status Engine::QueueCallback(std::function<absl::Status()> cb) {
  if (current_task == nullptr) {
    return absl::FailedPreconditionError(
        "QueueCallback: no backward is running on this thread; queue callbacks from a hook during Backward");
  }
  current_task->callbacks().push_back(std::move(cb));
  return absl::OkStatus();
}

bool Engine::InBackward() const { return current_task != nullptr; }

void Engine::SetPrioritiesEnabled(bool enabled) { priorities_enabled_.store(enabled); }
bool Engine::PrioritiesEnabled() const { return priorities_enabled_.load(); }

void Engine::SetNodeObserver(NodeObserver observer) {
  std::shared_ptr<const NodeObserver> next;
  if (observer) next = std::make_shared<const NodeObserver>(std::move(observer));
  std::lock_guard<std::mutex> lock(observer_mu_);
  observer_ = std::move(next);
}

absl::Status Backward(const Variable& root, bool retain_graph) {
  return Engine::Get().Backward({root}, {}, retain_graph);
}

std::vector<std::shared_ptr<AccumulateGrad>> ReachableAccumulators(const std::vector<Variable>& outputs) {
  std::vector<std::shared_ptr<AccumulateGrad>> found;
  std::unordered_set<const Node*> seen;
  std::vector<std::shared_ptr<Node>> stack;
  auto visit = [&](const std::shared_ptr<Node>& node) {
    if (node && seen.insert(node.get()).second) stack.push_back(node);
  };
  for (const Variable& out : outputs) {
    if (out.defined()) visit(out.gradient_edge().function);
  }
  // Depth-first; reversed pushes make each node's first edge explored first.
  std::reverse(stack.begin(), stack.end());
  while (!stack.empty()) {
    std::shared_ptr<Node> node = std::move(stack.back());
    stack.pop_back();
    if (auto acc = std::dynamic_pointer_cast<AccumulateGrad>(node)) found.push_back(std::move(acc));
    const std::vector<Edge>& edges = node->next_edges();
    for (auto it = edges.rbegin(); it != edges.rend(); ++it) {
      if (it->valid() && !seen.count(it->function.get())) {
        seen.insert(it->function.get());
        stack.push_back(it->function);
      }
    }
  }
  return found;
}

}  // namespace psync::autograd
