#include "psync/nn/models/registry.h"

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/nn/models/cnn.h"
#include "worker/nn/models/gpt.h"
#include "worker/nn/models/mlp.h"

namespace psync::nn {
namespace {

absl::StatusOr<std::unique_ptr<Model>> MakeMlp(const ModelOptions& o) {
  if (o.widths.size() < 2) return absl::InvalidArgumentError("--widths: an MLP needs at least two widths (in,out)");
  for (int64_t w : o.widths) {
    if (w <= 0) return absl::InvalidArgumentError(absl::StrCat("--widths: width ", w, " must be positive"));
  }
  return std::unique_ptr<Model>(std::make_unique<MLP>(o.widths, o.device, o.seed));
}

absl::StatusOr<std::unique_ptr<Model>> MakeGpt(const ModelOptions& o) {
  GptConfig c;
  c.vocab_size = o.vocab_size;
  c.block_size = o.block_size;
  c.n_layer = o.n_layer;
  c.n_head = o.n_head;
  c.n_embd = o.n_embd;
  absl::StatusOr<GptAttention> attention = ParseGptAttention(o.attention);
  if (!attention.ok()) return attention.status();
  c.attention = *attention;
  absl::Status st = ValidateGptConfig(c);
  if (!st.ok()) return st;
  return std::unique_ptr<Model>(std::make_unique<GPT>(c, o.device, o.seed));
}

absl::StatusOr<std::unique_ptr<Model>> MakeCnn(const ModelOptions& o) {
  const Shape& s = o.input_shape;
  if (s.size() != 3 || s[0] <= 0 || s[1] < 4 || s[2] < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=cnn needs images [C, H, W] with H, W >= 4 (two 2x2 poolings) from the data, got examples of shape ",
        ShapeToString(s)));
  }
  if (o.num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model=cnn needs classification data (a class count >= 1), got ", o.num_classes, " classes"));
  }
  if (o.cnn_channels.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("--cnn-channels: want two channel counts (c1,c2), got ",
                                                   o.cnn_channels.size(), " (", absl::StrJoin(o.cnn_channels, ","), ")"));
  }
  for (int64_t c : o.cnn_channels) {
    if (c <= 0) return absl::InvalidArgumentError(absl::StrCat("--cnn-channels: channel count ", c, " must be positive"));
  }
  return std::unique_ptr<Model>(std::make_unique<CNN>(s, o.num_classes, o.cnn_channels, o.device, o.seed));
}

// The table: the built-in models, then the registered ones. Registration
// happens in main() before any lookup from another thread; mu guards it anyway.
struct Catalog {
  std::mutex mu;
  Registry<Model, ModelOptions> registry{"model"};
  std::vector<std::pair<std::string, std::vector<ModelFlag>>> flags;  // per registered model

  Catalog() {
    registry.Add("mlp", "Linear layers with ReLU between them (--widths)", MakeMlp);
    registry.Add("gpt", "GPT-2-style transformer (--vocab-size --block-size --n-layer --n-head --n-embd)", MakeGpt);
    registry.Add("cnn",
                 "conv3x3+ReLU+maxpool2 twice, then Linear, on images [C, H, W] (--cnn-channels, default 16,32)",
                 MakeCnn);
  }
};

Catalog& TheCatalog() {
  static Catalog* catalog = new Catalog();
  return *catalog;
}

absl::Status ValidateRegistration(const ModelRegistration& m, const Registry<Model, ModelOptions>& registry) {
  bool name_ok = !m.name.empty() && m.name.size() <= 64;
  for (char c : m.name) name_ok = name_ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-');
  if (!name_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("RegisterModel: model name '", m.name, "' must be 1-64 characters of a-z, 0-9, '_', '-'"));
  }
  if (registry.Contains(m.name)) {
    return absl::InvalidArgumentError(absl::StrCat("RegisterModel: a model named '", m.name, "' is already registered"));
  }
  if (!m.factory) return absl::InvalidArgumentError(absl::StrCat("RegisterModel: model '", m.name, "' has no factory"));
  std::set<std::string> seen;
  for (const ModelFlag& f : m.flags) {
    if (absl::Status st = ValidateModelFlagName(f.name); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("RegisterModel '", m.name, "': ", st.message()));
    }
    if (!seen.insert(f.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("RegisterModel '", m.name, "': flag --", f.name, " declared twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterModel(ModelRegistration model) {
  Catalog& c = TheCatalog();
  std::lock_guard<std::mutex> lock(c.mu);
  if (absl::Status st = ValidateRegistration(model, c.registry); !st.ok()) return st;
  c.flags.emplace_back(model.name, model.flags);
  c.registry.Add(model.name, model.help, std::move(model.factory));
  return absl::OkStatus();
}

const Registry<Model, ModelOptions>& Models() { return TheCatalog().registry; }

std::vector<ModelFlag> ModelFlagsOf(const std::string& model) {
  Catalog& c = TheCatalog();
  std::lock_guard<std::mutex> lock(c.mu);
  for (const auto& [name, flags] : c.flags) {
    if (name == model) return flags;
  }
  return {};
}

std::vector<std::pair<std::string, ModelFlag>> AllModelFlags() {
  Catalog& c = TheCatalog();
  std::lock_guard<std::mutex> lock(c.mu);
  std::vector<std::pair<std::string, ModelFlag>> out;
  for (const auto& [name, flags] : c.flags) {
    for (const ModelFlag& f : flags) out.emplace_back(name, f);
  }
  return out;
}

}  // namespace psync::nn
