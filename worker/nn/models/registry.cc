#include "worker/nn/models/registry.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  absl::Status st = ValidateGptConfig(c);
  if (!st.ok()) return st;
  return std::unique_ptr<Model>(std::make_unique<GPT>(c, o.device, o.seed));
}

}  // namespace

const Registry<Model, ModelOptions>& Models() {
  static const Registry<Model, ModelOptions>* registry = [] {
    auto* r = new Registry<Model, ModelOptions>("model");
    r->Add("mlp", "Linear layers with ReLU between them (--widths)", MakeMlp);
    r->Add("gpt", "GPT-2-style transformer (--vocab-size --block-size --n-layer --n-head --n-embd)", MakeGpt);
    return r;
  }();
  return *registry;
}

}  // namespace psync::nn
