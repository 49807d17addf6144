#include "psync/nn/models/registry.h"

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/logging.h"
#include "psync/common/status_macros.h"
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
  PSYNC_ASSIGN_OR_RETURN(c.n_layer, o.flags.Int("n-layer"));
  PSYNC_ASSIGN_OR_RETURN(c.n_head, o.flags.Int("n-head"));
  PSYNC_ASSIGN_OR_RETURN(c.n_embd, o.flags.Int("n-embd"));
  PSYNC_ASSIGN_OR_RETURN(std::string attention, o.flags.String("attention"));
  PSYNC_ASSIGN_OR_RETURN(c.attention, ParseGptAttention(attention));
  PSYNC_RETURN_IF_ERROR(ValidateGptConfig(c));
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
  PSYNC_ASSIGN_OR_RETURN(std::vector<int64_t> channels, o.flags.Ints("cnn-channels"));
  if (channels.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("--cnn-channels: want two channel counts (c1,c2), got ",
                                                   channels.size(), " (", absl::StrJoin(channels, ","), ")"));
  }
  for (int64_t c : channels) {
    if (c <= 0) return absl::InvalidArgumentError(absl::StrCat("--cnn-channels: channel count ", c, " must be positive"));
  }
  return std::unique_ptr<Model>(std::make_unique<CNN>(s, o.num_classes, channels, o.device, o.seed));
}

// The built-in models, registered as a program registers its own: each
// declares its flags (the one default of each) and reads them in its factory.
std::vector<ModelRegistration> BuiltinModels() {
  std::vector<ModelRegistration> out(3);
  out[0].name = "mlp";
  out[0].help = "Linear layers with ReLU between them (--widths: input first, the hidden widths, output last)";
  out[0].factory = MakeMlp;
  out[1].name = "gpt";
  out[1].help = "GPT-2-style transformer on tokens (--vocab-size, --block-size and its flags below)";
  out[1].flags = {{"n-layer", "4", "transformer blocks L"},
                  {"n-head", "4", "attention heads H"},
                  {"n-embd", "128", "embedding width C (divisible by --n-head)"},
                  {"attention", "fused",
                   "fused (flash-style, O(T) memory) | materialized ([B, H, T, T] scores; the reference)"}};
  out[1].factory = MakeGpt;
  out[2].name = "cnn";
  out[2].help = "conv3x3+ReLU+maxpool2 twice, then Linear, on images [C, H, W]";
  out[2].flags = {{"cnn-channels", "16,32", "output channels of the two 3x3 convolutions (c1,c2)"}};
  out[2].factory = MakeCnn;
  return out;
}

// The table: the built-in models, then the registered ones. Registration
// happens in main() before any lookup from another thread; mu guards it anyway.
struct Catalog {
  std::mutex mu;
  Registry<Model, ModelOptions> registry{"model"};
  std::vector<std::pair<std::string, std::vector<ModelFlag>>> flags;  // per model, in registration order
};

absl::Status Add(Catalog& c, ModelRegistration model);

Catalog& TheCatalog() {
  static Catalog* catalog = [] {
    auto* c = new Catalog();
    for (ModelRegistration& m : BuiltinModels()) {
      absl::Status st = Add(*c, std::move(m));
      if (!st.ok()) PSYNC_LOG(ERROR) << "built-in model not registered: " << st.message();  // a bug in BuiltinModels
    }
    return c;
  }();
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

// Why the wrapper: a factory reads every flag it declared, but options made
// by hand (a test, psync-sample on an older file) may leave some out; they
// get the declared default here. (psync-worker's ResolveModelFlags fills the
// same declared defaults in earlier, so checkpoints record every flag.)
absl::Status Add(Catalog& c, ModelRegistration model) {
  if (absl::Status st = ValidateRegistration(model, c.registry); !st.ok()) return st;
  c.flags.emplace_back(model.name, model.flags);
  c.registry.Add(model.name, model.help,
                 [declared = model.flags, factory = std::move(model.factory)](const ModelOptions& o) {
                   ModelOptions with = o;
                   for (const ModelFlag& f : declared) {
                     if (!with.flags.Has(f.name)) with.flags.Set(f.name, f.default_value);
                   }
                   return factory(with);
                 });
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterModel(ModelRegistration model) {
  Catalog& c = TheCatalog();
  std::lock_guard<std::mutex> lock(c.mu);
  return Add(c, std::move(model));
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
