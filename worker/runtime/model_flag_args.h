// A registered model's own flags on psync-worker's command line
// (psync/nn/models/model_flags.h): split out of argv before the Abseil
// flags are parsed, then resolved for the --model chosen.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "psync/nn/models/model_flags.h"

namespace psync::runtime {

struct ModelFlagArgs {
  std::vector<std::string> rest;             // argv without them (argv[0] first)
  std::map<std::string, std::string> given;  // dashed name -> value
};

// Takes every --NAME=VALUE, --NAME VALUE (dashes or underscores, one or two
// leading dashes) whose NAME a registered model declared. InvalidArgument
// when a model declared a name of `worker_flags` (underscore form: psync-
// worker's own), or a model flag is missing its value.
absl::StatusOr<ModelFlagArgs> SplitModelFlags(int argc, char** argv, const std::set<std::string>& worker_flags);

// The flags of `model`: each declared flag's value given, or its default.
// InvalidArgument for a given flag that `model` does not declare (naming the
// models that do).
absl::StatusOr<nn::ModelFlags> ResolveModelFlags(const std::string& model,
                                                 const std::map<std::string, std::string>& given);

// "models:" and each registered model's flags, for --help.
std::string ModelsHelp();

}  // namespace psync::runtime
