#include "worker/nn/models/registry.h"

#include <memory>
#include <string>

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

}  // namespace

const Registry<Model, ModelOptions>& Models() {
  static const Registry<Model, ModelOptions>* registry = [] {
    auto* r = new Registry<Model, ModelOptions>("model");
    r->Add("mlp", "Linear layers with ReLU between them (--widths)", MakeMlp);
    r->Add("gpt", "GPT-2-style transformer (--vocab-size --block-size --n-layer --n-head --n-embd)", MakeGpt);
    r->Add("cnn", "conv3x3+ReLU+maxpool2 twice, then Linear, on images [C, H, W] (--cnn-channels, default 16,32)",
           MakeCnn);
    return r;
  }();
  return *registry;
}

}  // namespace psync::nn
