// The model psync-worker trains: --model and its flags, checked against the
// data it will see (input width, classes, vocabulary), built on the device,
// with --init loaded and the skip flags validated. Errors are InvalidArgument
// naming the flag (the worker exits 2 before joining the job).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"
#include "worker/nn/models/model.h"
#include "worker/runtime/worker_flags.h"

namespace psync::runtime {

struct BuiltModel {
  std::unique_ptr<nn::Model> model;
  nn::ModelOptions options;  // what it was built from (checkpoints and --save record it)
  // --precision, in use by the model; the optimizer writes its weight
  // copies, and weights loaded later (--resume) need RefreshCopies().
  std::shared_ptr<const nn::PrecisionPolicy> precision;
};

absl::StatusOr<BuiltModel> BuildModel(const WorkerOptions& opt, const data::DataInfo& data, Device device);

}  // namespace psync::runtime
