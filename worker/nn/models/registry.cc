#include "worker/nn/models/registry.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

}  // namespace

const Registry<Model, ModelOptions>& Models() {
  static const Registry<Model, ModelOptions>* registry = [] {
    auto* r = new Registry<Model, ModelOptions>("model");
    r->Add("mlp", "Linear layers with ReLU between them (--widths)", MakeMlp);
    return r;
  }();
  return *registry;
}

}  // namespace psync::nn
