// StepGraph: the work of a training step captured once into a CUDA graph
// and replayed, so a step costs one graph launch instead of hundreds of
// kernel launches (host time the GPU would otherwise wait for).
//
// Capture runs `queue` with the device's compute stream in capture mode
// (relaxed: the engine and ops may run host code freely, but nothing is
// executed), then instantiates the graph. What `queue` does must be
// capturable and the same every step:
//   - no host synchronization (Item, ToVector, copies to the host) and no
//     copies from pageable host memory (inputs live on the device already);
//   - stream-ordered allocations are fine (they become graph allocations;
//     the graph frees on relaunch whatever it allocated and did not free,
//     so a tensor it returns, e.g. the loss, stays readable until the next
//     replay, at the same address);
//   - kernel parameters are fixed at capture: per-step scalars (the
//     learning rate, AdamW's bias corrections) must not be captured, so the
//     optimizer step stays outside the graph.
// Without CUDA every call throws TensorError.
//
// Threads: a StepGraph belongs to the thread that captured it.
#pragma once

#include <functional>
#include <memory>

namespace psync::cuda_graph {

class StepGraph {
 public:
  // Captures `queue` on `device`'s compute stream. Throws TensorError when
  // the capture or instantiation fails (naming the CUDA error).
  StepGraph(int device, const std::function<void()>& queue);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Launches the graph on the compute stream (returns without waiting).
  void Replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace psync::cuda_graph
