// The job's fingerprint: everything beyond the parameter shapes that
// defines the job's math, sent at Join as JoinRequest.settings
// (coordinator.proto), so the coordinator refuses a rank that would train
// a different job before any step, naming the setting and both values.
//
// What is in it (docs/cli-contract.md, "Flags every rank must agree on"):
// the model (--model and its whole configuration with its own flags, as a
// checkpoint records it), the optimizer and its hyperparameters, the
// schedule, clipping, --steps, --accumulate, --precision, --zero,
// --grad-compression, --find-unused-parameters, the skipped layer, the
// evaluation flags (evaluation is collective), the data's identity and
// order (its kind, size and a hash of sampled examples: the contents, not
// the path, which may differ per rank), --shuffle and --seed. Bucket caps,
// --backend, --global-batch and the resume mode are checked at Join by
// fields of their own. Paths, logging and the control plane may differ.
//
// Threads: a pure function.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "worker/data/dataset.h"
#include "psync/nn/models/model.h"
#include "worker/runtime/worker_flags.h"

namespace psync::runtime {

using JobSettings = std::vector<std::pair<std::string, std::string>>;

// `model` is the built model's configuration (with what the data decided,
// e.g. the vocabulary); `val` may be null. Names are the flags as a user
// writes them ("--n-head"), or "data" / "val data" for the data's identity.
JobSettings JobFingerprint(const WorkerOptions& opt, const nn::ModelOptions& model, const data::Dataset& train,
                           const data::Dataset* val);

// A dataset's identity: "<task>, N examples of [shape], K outputs, hash H",
// H over a sample of its examples (the first and last few), so equal files
// at different paths agree and different contents almost surely differ.
std::string DataIdentity(const data::Dataset& data);

// The shortest decimal that reads back as exactly `v` ("0.003", not
// "0.0030000000000000001"), so a setting differs exactly when the value does.
std::string ExactDouble(double v);

}  // namespace psync::runtime
