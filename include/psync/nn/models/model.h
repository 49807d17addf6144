// Model: a trainable network the worker can run. One interface, one
// implementation per architecture, chosen by --model through the registry
// in psync/nn/models/registry.h (mlp, gpt, cnn, and the models a program
// registers with RegisterModel). Every model registers its
// parameters in a fixed order with PyTorch-compatible names, so --init and
// checkpoints load in PyTorch and back.
//
// The trainer calls Forward on a micro-batch's inputs and computes the loss
// from the output and the batch's targets (data::Task decides which loss);
// it never names a specific model.
#pragma once

#include <cstdint>
#include <set>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/nn/models/model_flags.h"
#include "psync/nn/module.h"
#include "psync/nn/precision.h"
#include "psync/tensor/device.h"

namespace psync::nn {

// What every model is built from: where, the seed, and what the data says.
// A model's own architecture (the GPT's --n-layer, the CNN's
// --cnn-channels, a registered model's flags) is in `flags`, declared by
// its registration (registry.h), never a field here.
struct ModelOptions {
  Device device = Device::CPU();
  uint64_t seed = 0;
  // --widths: the rows' widths (input first, output last), which the
  // synthetic rows take their shape from; --model=mlp's layer widths.
  std::vector<int64_t> widths;
  // Token data: the vocabulary (--vocab-size, or the data's) and the tokens
  // per sequence (--block-size).
  int64_t vocab_size = 0, block_size = 0;
  // Images and rows: one example's shape ([C, H, W] or [in]) and the class
  // count (the outputs per example for regression rows).
  Shape input_shape;
  int64_t num_classes = 0;
  // The model's own flags (model_flags.h): each one its registration
  // declared, with the value given or its default (Models().Create fills
  // in the defaults of any left out).
  ModelFlags flags;
};

class Model : public Module {
 public:
  // inputs: one micro-batch (rows [b, in]; images [b, C, H, W]; tokens
  // [b, T] int64) -> predictions [b, out] or logits [b, classes] /
  // [b, T, vocab]. `skip`: blocks/layers bypassed in this forward (their
  // parameters unused), per --skip-layer / --skip-block.
  virtual Variable Forward(const Variable& inputs, const std::set<int>& skip) = 0;
  Variable Forward(const Variable& inputs) final { return Forward(inputs, {}); }
  // OK when every index in `skip` may be skipped; otherwise names it and why.
  virtual absl::Status ValidateSkip(const std::set<int>& skip) const = 0;
  // "gpt (L=4, H=4, C=128, V=256, T=64): 0.85M parameters"
  virtual std::string Describe() const = 0;
  // The parameters its matmuls read, (name, parameter): what a bf16 policy
  // keeps bfloat16 copies of. None (the default): the model computes in
  // float32 only, and --precision=bf16 is refused for it.
  virtual std::vector<std::pair<std::string, Variable>> MatmulWeights() const { return {}; }
  // Makes the model compute with `precision` (nn/precision.h) and returns
  // the policy (the optimizer writes its copies: PrecisionPolicy::CopiesFor).
  absl::StatusOr<std::shared_ptr<const PrecisionPolicy>> UsePrecision(Precision precision) {
    auto policy = PrecisionPolicy::Create(precision, MatmulWeights());
    if (!policy.ok()) return policy.status();
    SetPrecision(*policy);
    return std::shared_ptr<const PrecisionPolicy>(*policy);
  }
};

}  // namespace psync::nn
