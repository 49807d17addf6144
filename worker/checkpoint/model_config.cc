#include "worker/checkpoint/model_config.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json.h"

namespace psync::checkpoint {
namespace {

// One field of ModelOptions: its key and how to print and parse it.
struct Field {
  const char* key;
  int64_t nn::ModelOptions::*scalar = nullptr;
  std::vector<int64_t> nn::ModelOptions::*list = nullptr;
};

const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = {
      {"widths", nullptr, &nn::ModelOptions::widths},
      {"vocab_size", &nn::ModelOptions::vocab_size},
      {"block_size", &nn::ModelOptions::block_size},
      {"input_shape", nullptr, &nn::ModelOptions::input_shape},
      {"num_classes", &nn::ModelOptions::num_classes},
  };
  return fields;
}

constexpr char kSeed[] = "seed";

// Keys of files from psync before 0.9, where these were fields written for
// every model: (key, the model that owns it, its flag now).
struct LegacyKey {
  const char* key;
  const char* model;
  const char* flag;
};
constexpr LegacyKey kLegacyKeys[] = {{"n_layer", "gpt", "n-layer"},
                                     {"n_head", "gpt", "n-head"},
                                     {"n_embd", "gpt", "n-embd"},
                                     {"cnn_channels", "cnn", "cnn-channels"}};

// Canonical decimal (one spelling per value).
template <typename Int>
bool ParseInt(absl::string_view text, Int* out) {
  return absl::SimpleAtoi(text, out) && absl::StrCat(*out) == text;
}

}  // namespace

std::map<std::string, std::string> EncodeModelConfig(const nn::ModelOptions& options) {
  std::map<std::string, std::string> out;
  for (const Field& f : Fields()) {
    out[f.key] = f.scalar != nullptr ? absl::StrCat(options.*f.scalar) : absl::StrJoin(options.*f.list, ",");
  }
  out[kSeed] = absl::StrCat(options.seed);
  for (const auto& [name, value] : options.flags.values()) out[absl::StrCat(kModelFlagPrefix, name)] = value;
  return out;
}

absl::StatusOr<nn::ModelOptions> DecodeModelConfig(const ModelRecord& model, const std::string& source) {
  auto error = [&](const std::string& key, absl::string_view problem) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", source, ": model configuration ", json::Quote(key), " ", problem));
  };
  nn::ModelOptions out;
  std::map<std::string, std::string> flags;
  for (const auto& [key, value] : model.config) {
    if (absl::StartsWith(key, kModelFlagPrefix)) {
      flags[key.substr(sizeof(kModelFlagPrefix) - 1)] = value;
      continue;
    }
    const LegacyKey* legacy = nullptr;
    for (const LegacyKey& l : kLegacyKeys) {
      if (key == l.key) legacy = &l;
    }
    if (legacy != nullptr) {
      // The flag of the model the file holds; the other models' were written as zeros.
      if (model.kind == legacy->model) flags.emplace(legacy->flag, value);
      continue;
    }
    if (key == kSeed) {
      if (!ParseInt(value, &out.seed)) return error(key, absl::StrCat("is ", json::Quote(value), ", expected a uint64"));
      continue;
    }
    const Field* field = nullptr;
    for (const Field& f : Fields()) {
      if (key == f.key) field = &f;
    }
    if (field == nullptr) return error(key, "is not a model option this psync knows");
    if (field->scalar != nullptr) {
      if (!ParseInt(value, &(out.*field->scalar))) {
        return error(key, absl::StrCat("is ", json::Quote(value), ", expected an integer"));
      }
      continue;
    }
    std::vector<int64_t>& list = out.*field->list;
    if (value.empty()) continue;
    for (absl::string_view item : absl::StrSplit(value, ',')) {
      int64_t v = 0;
      if (!ParseInt(item, &v)) {
        return error(key, absl::StrCat("is ", json::Quote(value), ", expected integers joined by \",\""));
      }
      list.push_back(v);
    }
  }
  out.flags = nn::ModelFlags(std::move(flags));
  return out;
}

ModelRecord ModelFromMetadata(const std::map<std::string, std::string>& metadata) {
  ModelRecord r;
  const absl::string_view prefix = kModelConfigPrefix;
  for (const auto& [k, v] : metadata) {
    if (k == kModelKindKey) r.kind = v;
    else if (absl::StartsWith(k, prefix)) r.config[k.substr(prefix.size())] = v;
  }
  return r;
}

}  // namespace psync::checkpoint
