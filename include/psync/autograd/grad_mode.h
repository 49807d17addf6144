// Grad mode: whether differentiable functions record the graph, per thread
// (like torch.no_grad). Evaluation and sampling run forward under a
// NoGradGuard: no backward nodes are built and nothing is saved for them.
#pragma once

namespace psync::autograd {

class GradMode {
 public:
  static bool enabled();
  static void set_enabled(bool enabled);
};

// Disables graph recording on this thread for its scope.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace psync::autograd
