// The model psync-worker trains: --model and its flags, checked against the
// data it will see (input width, classes, vocabulary), built on the device,
// with --init loaded and the skip flags validated. Errors are InvalidArgument
// naming the flag (the worker exits 2 before joining the job).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/checkpoint/weights.h"
#include "worker/data/dataset.h"
#include "psync/nn/precision.h"
#include "psync/nn/models/model.h"

namespace psync::runtime {

// The model the flags ask for (run_options.h builds it).
struct ModelSpec {
  std::string name = "mlp";  // --model (nn/models/registry.h)
  // From the flags: seed, widths, vocab_size, block_size and the model's
  // own flags. BuildModel adds the device and what the data says
  // (example shape, classes or vocabulary).
  nn::ModelOptions options;
  int skip_layer = -1;        // --skip-layer / --skip-block; -1 = none
  std::string init_path;      // --init; empty = the seeded initialisation
  checkpoint::WeightsFormat init_format = checkpoint::WeightsFormat::kAuto;  // --init-format
  nn::Precision precision = nn::Precision::kFp32;  // --precision (nn/precision.h)
};

struct BuiltModel {
  std::unique_ptr<nn::Model> model;
  nn::ModelOptions options;  // what it was built from (checkpoints and --save record it)
  // --precision, in use by the model; the optimizer writes its weight
  // copies, and weights loaded later (--resume) need RefreshCopies().
  std::shared_ptr<const nn::PrecisionPolicy> precision;
};

absl::StatusOr<BuiltModel> BuildModel(const ModelSpec& spec, const data::DataInfo& data, Device device);

}  // namespace psync::runtime
