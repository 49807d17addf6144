#include "worker/runtime/model_builder.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/status_from_exception.h"
#include "psync/nn/models/registry.h"
#include "worker/runtime/init_weights.h"

namespace psync::runtime {

namespace {

// The model's options from the flags, checked against what the data holds.
absl::StatusOr<nn::ModelOptions> OptionsFor(const ModelSpec& spec, const data::DataInfo& data, Device device) {
  nn::ModelOptions m = spec.options;
  m.device = device;
  m.input_shape = data.example_shape;
  m.num_classes = data.num_outputs;
  const std::string task = data::TaskName(data.task);
  if (spec.name == "gpt") {
    if (data.task != data::Task::kLanguageModel) {
      return absl::InvalidArgumentError(absl::StrCat("--model=gpt trains on token data, but --data holds ", task,
                                                     " data (use --data-format=tokens or bytes)"));
    }
    if (m.vocab_size == 0) m.vocab_size = data.num_outputs;
    if (data.max_token_id >= m.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("--vocab-size=", m.vocab_size, " is too small for --data: it holds token id ",
                                                     data.max_token_id, " (use --vocab-size=", data.max_token_id + 1,
                                                     " or more)"));
    }
  } else if (spec.name == "mlp") {
    if (data.task == data::Task::kLanguageModel) {
      return absl::InvalidArgumentError("--model=mlp trains on rows or images; for token data use --model=gpt");
    }
    const int64_t in = NumelOf(data.example_shape);
    if (m.widths.front() != in) {
      return absl::InvalidArgumentError(absl::StrCat("--widths starts with ", m.widths.front(), " but each example of --data has ",
                                                     in, " features (", ShapeToString(data.example_shape),
                                                     "); use --widths=", in, ",...,", data.num_outputs));
    }
    if (m.widths.back() != data.num_outputs) {
      return absl::InvalidArgumentError(
          absl::StrCat("--widths ends with ", m.widths.back(), " but --data has ", data.num_outputs,
                       data.task == data::Task::kClassification ? " classes" : " outputs per example", "; use --widths=",
                       absl::StrJoin(std::vector<int64_t>(m.widths.begin(), m.widths.end() - 1), ","), ",",
                       data.num_outputs));
    }
  }
  return m;
}

}  // namespace

absl::StatusOr<BuiltModel> BuildModel(const ModelSpec& spec, const data::DataInfo& data, Device device) {
  absl::StatusOr<nn::ModelOptions> mopt = OptionsFor(spec, data, device);
  if (!mopt.ok()) return mopt.status();
  absl::StatusOr<std::unique_ptr<nn::Model>> model;
  if (absl::Status thrown = RunCatching("building the model", [&] { model = nn::Models().Create(spec.name, *mopt); });
      !thrown.ok()) {
    return thrown;
  }
  if (!model.ok()) return absl::InvalidArgumentError(absl::StrCat("--model: ", model.status().message()));
  if (spec.skip_layer >= 0) {
    absl::Status st = (*model)->ValidateSkip({spec.skip_layer});
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.name == "gpt" ? "--skip-block: " : "--skip-layer: ", st.message()));
    }
  }
  if (!spec.init_path.empty()) {
    absl::Status st = LoadInitialWeights(spec.init_path, **model, spec.init_format);
    if (!st.ok()) return st;
  }
  // After --init, so the bf16 copies start from the loaded weights.
  auto policy = (*model)->UsePrecision(spec.precision);
  if (!policy.ok()) return absl::InvalidArgumentError(absl::StrCat(policy.status().message(), " (--model=", spec.name, ")"));
  return BuiltModel{std::move(*model), *mopt, *policy};
}

}  // namespace psync::runtime
