// PrecisionPolicy: how a model computes, chosen by --precision; the one
// object its layers consult (Module::precision()).
//
//   fp32  float32 everywhere (the default, and every module's until told).
//   tf32  float32 tensors; CUDA float32 products on TF32 tensor cores
//         (ops::SetAllowTf32, set when the policy is created). On the CPU
//         the same as fp32.
//   bf16  PyTorch autocast's rules for a transformer: matmul inputs in
//         bfloat16 with float32 accumulation and bfloat16 results; LayerNorm,
//         softmax, cross-entropy and every reduction computed in float32; the
//         residual stream float32. Parameters (the master weights), their
//         gradients (DDP buckets, reduced in float32) and the optimizer's
//         state stay float32. Every weight a matmul reads has a bfloat16 copy,
//         which the layers read and the optimizer step writes as it updates
//         the master (no separate cast pass).
//
// The copies live in one flat bfloat16 buffer, each a view of its weight's
// shape, in the order the model lists them (Model::MatmulWeights). They are
// derived state: checkpoints hold the float32 masters only, and after
// weights are loaded or changed outside the optimizer RefreshCopies()
// rebuilds them (the same bits as the optimizer would write). A sharded
// optimizer can write its own slice of the flat buffer and all-gather it.
//
// Threads: created and refreshed on the training thread; the copies are
// written by the optimizer step and read by forward and backward, on that
// thread (and its device's compute stream).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "psync/autograd/variable.h"
#include "psync/tensor/tensor.h"

namespace psync::nn {

enum class Precision { kFp32, kTf32, kBf16 };

// "fp32", "tf32", "bf16" (also "float32", "bfloat16").
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);
const char* PrecisionName(Precision p);

class PrecisionPolicy {
 public:
  // float32 everywhere: what a module without a policy uses.
  static const PrecisionPolicy& Fp32();
  // The policy of a model whose matmuls read `matmul_weights` (its
  // MatmulWeights()). bf16 makes their copies (on the weights' device,
  // filled from them); InvalidArgument when bf16 is asked for a model with
  // no matmul weights (one that does not implement it) or weights that are
  // not float32 on one device. Sets the process-wide TF32 switch to
  // precision == tf32.
  static absl::StatusOr<std::shared_ptr<PrecisionPolicy>> Create(
      Precision precision, const std::vector<std::pair<std::string, autograd::Variable>>& matmul_weights);

  Precision precision() const { return precision_; }
  // The dtype of the activations a matmul reads and writes: bfloat16 for
  // bf16, else float32.
  DType compute_dtype() const { return precision_ == Precision::kBf16 ? kBFloat16 : kFloat32; }
  // The dtype a layer feeding a matmul stores its result in, given its
  // input's: bfloat16 for a float32/bfloat16 input in a bf16 step, else the
  // input's own (float64 gradient checks stay float64).
  DType OutputDType(DType input) const {
    return precision_ == Precision::kBf16 && (input == kFloat32 || input == kBFloat16) ? kBFloat16 : input;
  }
  // What a matmul reads for `weight`: its bfloat16 copy, or weight.data()
  // when it has none (fp32, tf32, or a weight no matmul reads).
  const Tensor& MatmulWeight(const autograd::Variable& weight) const;
  // The copy of each of `params` (undefined where none), in their order:
  // what the optimizer writes as it steps.
  std::vector<Tensor> CopiesFor(const std::vector<std::pair<std::string, autograd::Variable>>& params) const;
  // Every copy, as one flat bfloat16 tensor (undefined without copies).
  const Tensor& flat_copies() const { return flat_; }
  // Rewrites every copy from its master's current value.
  void RefreshCopies() const;
  // Rewrites the copies of those of `weights` that have one (--zero=3: a
  // bucket's, once its parameters are gathered).
  void RefreshCopiesOf(const std::vector<autograd::Variable>& weights) const;

 private:
  PrecisionPolicy() = default;
  Precision precision_ = Precision::kFp32;
  Tensor flat_;
  // By the master's variable state: (master, copy).
  std::unordered_map<const autograd::VariableState*, std::pair<autograd::Variable, Tensor>> copies_;
};

}  // namespace psync::nn
