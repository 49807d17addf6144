// Optimizer: updates parameters from their (averaged) gradients. One
// interface, one implementation per algorithm, chosen by --optimizer through
// the registry in optim/registry.h (sgd, adamw).
//
// Semantics follow PyTorch: a parameter whose grad is undefined in a step
// (unused on every rank) is left untouched: no decay, no moment update, and
// its own step count (for bias correction) does not advance.
//
// State: per parameter, a step count (the steps it took) and the
// algorithm's buffers (moments, momentum), created at construction (zeros)
// on the parameter's device. State()/LoadState() are implemented once here
// from the buffers each algorithm names (StateBuffers), so every optimizer
// saves and restores the same way.
//
// Threads: the training thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/common/logging.h"
#include "psync/autograd/variable.h"
#include "psync/tensor/named_tensors.h"

namespace psync::optim {

using NamedParams = std::vector<std::pair<std::string, autograd::Variable>>;

// Hyperparameters that stay fixed for a run (--flags of psync-worker). The
// learning rate is not here: the schedule (schedule.h) owns the peak rate
// and Step() takes each step's value.
struct OptimizerOptions {
  double momentum = 0;      // sgd
  double weight_decay = 0;  // sgd: L2 added to the gradient (every parameter);
                            // adamw: decoupled, p *= 1 - lr*wd, parameters with >= 2 dims only
  double beta1 = 0.9;       // adamw
  double beta2 = 0.95;
  double eps = 1e-8;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // One update of every parameter with a defined grad, at learning rate
  // `lr` (the schedule's value for this step). Tensor errors come back as
  // InvalidArgument naming the parameter (parameters before it were updated;
  // AdamW checks every parameter before it updates any).
  virtual absl::Status Step(double lr) = 0;
  // Clears every parameter's grad (set_to_none) or zeroes it in place (so
  // grads that are DDP bucket views stay views).
  void ZeroGrad(bool set_to_none = true);

  // The whole state as named tensors, for checkpoints: "<param>.step" (int64
  // [], CPU) for every parameter, then its buffers "<param>.<buffer>" (the
  // live tensors on the parameter's device, not copies: save them before the
  // next Step). LoadState restores exactly (same bits): it expects exactly
  // the entries State() lists, with the same shapes and dtypes, copies them
  // into this optimizer, and otherwise changes nothing and names the missing,
  // unexpected or mis-shaped entry.
  NamedTensors State() const;
  absl::Status LoadState(const NamedTensors& state);

  // What a checkpoint holds and restores: State() in full (every
  // parameter's buffers with the parameter's shape), whoever holds it.
  // Collective for a sharded optimizer (every rank calls it, in the same
  // order; `keep` false: this rank takes part but gets an empty list, so
  // only the writer holds the whole state). Default: State(), LoadState().
  virtual absl::StatusOr<NamedTensors> CheckpointState(bool keep = true);
  // Takes this rank's part of a full state as CheckpointState gives it, at
  // any world size (a sharded optimizer keeps only its slices).
  virtual absl::Status LoadCheckpointState(const NamedTensors& state);
  // Clipping by the global gradient norm over the gradients this optimizer
  // steps on (clip.h's semantics and rounding of the coefficient); returns
  // the norm. A sharded optimizer sums its shards and combines the ranks'
  // partial sums in rank order (collective).
  virtual absl::StatusOr<double> ClipGradNorm(double max_norm);
  // Bytes of optimizer state this rank holds (buffers and step counts).
  virtual int64_t state_bytes() const;

  // (name, parameter) in registration order.
  const NamedParams& params() const { return params_; }
  // Steps parameter i has taken (the ones where it had a gradient).
  int64_t step_count(size_t i) const { return steps_[i]; }

  // Every parameter defined, requiring grad, float32 or float64, with a
  // unique non-empty name. The registry checks this before constructing.
  static absl::Status ValidateParams(const NamedParams& params);

  // Low-precision copies of the parameters' values that every Step writes
  // as it updates each parameter (in the same pass where the kernel allows:
  // AdamW), so a bf16 step's matmuls read fresh weights with no cast pass
  // (nn/precision.h). One per parameter (undefined where none), each a
  // contiguous bfloat16 tensor of its parameter's shape; empty: none. They
  // are derived state: State() does not list them. InvalidArgument naming
  // the parameter when one does not fit.
  absl::Status SetWeightCopies(std::vector<Tensor> copies);

 protected:
  explicit Optimizer(NamedParams params) : params_(std::move(params)), steps_(params_.size(), 0) {}
  // Parameter i's buffers, (suffix, live tensor), in a fixed order.
  virtual std::vector<std::pair<std::string, Tensor>> StateBuffers(size_t i) const = 0;
  // For every parameter with a defined grad: advances its step count (as
  // torch does first), then runs update(i); tensor errors become a Status
  // naming the parameter.
  template <typename Fn>
  absl::Status ForEachWithGrad(Fn update);
  absl::Status ParamError(size_t i, const std::exception& e, bool internal) const;
  // Checks `state` against the entries expected (each present once with its
  // shape and dtype, step counts >= 0, nothing else) and maps name -> tensor;
  // InvalidArgument naming the first bad entry.
  struct StateEntry {
    std::string key;
    Shape shape;
    DType dtype = kFloat32;
  };
  absl::StatusOr<std::map<std::string, const Tensor*>> MatchState(const std::vector<StateEntry>& expected,
                                                                 const NamedTensors& state) const;

  // Parameter i's copy (undefined when it has none).
  Tensor weight_copy(size_t i) const { return copies_.empty() ? Tensor() : copies_[i]; }

  NamedParams params_;
  std::vector<int64_t> steps_;
  std::vector<Tensor> copies_;  // SetWeightCopies; empty or one per parameter
};

template <typename Fn>
absl::Status Optimizer::ForEachWithGrad(Fn update) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].second.grad().defined()) continue;
    ++steps_[i];
    try {
      update(i);
    } catch (const TensorError& e) {
      return ParamError(i, e, /*internal=*/false);
    } catch (const InternalError& e) {
      return ParamError(i, e, /*internal=*/true);
    }
  }
  return absl::OkStatus();
}

}  // namespace psync::optim
