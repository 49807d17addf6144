// The models psync-worker can train, chosen by --model: the built-in mlp,
// gpt and cnn (registered through RegisterModel like any other, with their
// own flags: gpt's --n-layer, --n-head, --n-embd, --attention; cnn's
// --cnn-channels), and every model a program registers before it calls
// psync::runtime::WorkerMain (psync/runtime/worker_main.h):
//
//   psync::nn::ModelRegistration llama;
//   llama.name = "llama";
//   llama.help = "Llama-style decoder (--n-kv-head)";
//   llama.flags = {{"n-kv-head", "2", "key/value heads"}};
//   llama.factory = [](const psync::nn::ModelOptions& o) -> absl::StatusOr<std::unique_ptr<psync::nn::Model>> {
//     PSYNC_ASSIGN_OR_RETURN(int64_t kv, o.flags.Int("n-kv-head"));
//     return std::make_unique<Llama>(o.vocab_size, o.block_size, kv, o.device, o.seed);
//   };
//   PSYNC_RETURN_IF_ERROR(psync::nn::RegisterModel(std::move(llama)));
//
// A factory gets the worker's device and --seed, what the data implies
// (vocab_size and block_size for tokens, input_shape and num_classes for
// images and rows) and its own flags, each one it declared (a flag the
// options leave out gets its declared default); it validates them (InvalidArgument
// naming the flag, before anything is built) and builds the model there.
//
// Threads: register from main() before WorkerMain; lookups are read-only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/common/registry.h"
#include "psync/nn/models/model.h"
#include "psync/nn/models/model_flags.h"

namespace psync::nn {

struct ModelRegistration {
  std::string name;  // --model=NAME: [a-z0-9_-], unique
  std::string help;  // one line for --help
  std::vector<ModelFlag> flags;  // its own flags (model_flags.h)
  std::function<absl::StatusOr<std::unique_ptr<Model>>(const ModelOptions&)> factory;
};

// Adds a model. InvalidArgument for an empty or taken name, no factory, or
// an invalid or repeated flag name. (WorkerMain refuses a flag name that is
// one of psync-worker's own flags.) Two models may declare the same flag
// name, each with its own default and meaning (gpt's --n-layer and a
// Llama's): only the chosen --model's flags are read.
absl::Status RegisterModel(ModelRegistration model);

// The registered models: the built-in ones first, then the registered ones.
const Registry<Model, ModelOptions>& Models();

// The flags `model` declared (empty for an unknown name).
std::vector<ModelFlag> ModelFlagsOf(const std::string& model);
// Every registered model's flags, (model, flag), in registration order.
std::vector<std::pair<std::string, ModelFlag>> AllModelFlags();

}  // namespace psync::nn
