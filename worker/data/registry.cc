#include "worker/data/registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/status_macros.h"
#include "worker/data/fashion_mnist.h"
#include "worker/data/format_detect.h"
#include "worker/data/idx_dataset.h"
#include "worker/data/rows_dataset.h"
#include "worker/data/token_dataset.h"

namespace psync::data {

const Registry<Dataset, DataOptions>& Datasets() {
  static const Registry<Dataset, DataOptions>* registry = [] {
    auto* r = new Registry<Dataset, DataOptions>("--data-format");
    r->Add("rows", "safetensors x [N,in], y [N,out] (float32): regression", OpenRows)
        .Add("synthetic", "seeded regression rows (--synthetic-rows, --seed): no file", OpenSynthetic)
        .Add("idx", "IDX images + labels, gzip or plain (Fashion-MNIST): classification", OpenIdx)
        .Add("tokens", "llm.c token file (magic 20240520, uint16 tokens), memory-mapped: language model", OpenTokens)
        .Add("bytes", "any file, each byte a token (V = 256), memory-mapped: language model", OpenBytes);
    return r;
  }();
  return *registry;
}

namespace {

std::string ShapeText(const DataInfo& i) {
  return absl::StrCat(TaskName(i.task), " examples of shape ", ShapeToString(i.example_shape),
                      i.task == Task::kLanguageModel ? "" : absl::StrCat(" with ", i.num_outputs, " outputs"));
}

absl::Status CheckCompatible(const Dataset& train, const Dataset& val, const std::string& val_source) {
  const DataInfo& a = train.info();
  const DataInfo& b = val.info();
  const bool outputs_differ = a.task != Task::kLanguageModel && a.num_outputs != b.num_outputs;
  if (a.task != b.task || a.example_shape != b.example_shape || outputs_differ) {
    return absl::InvalidArgumentError(absl::StrCat(val_source, " holds ", ShapeText(b), ", expected ", ShapeText(a),
                                                   " like --data (", train.Describe(), ")"));
  }
  return absl::OkStatus();
}

// Token data: the held-out set's ids must fit the model's vocabulary, as
// --data's do (the model builder checks those). Why here, before training:
// an id out of range fails only in the evaluation, after every step ran.
// V is --vocab-size, else what --data holds (its largest id + 1). Shards
// checked as read (max_token_id -1) report a bad id with its file then.
absl::Status CheckHeldOutIds(const Dataset& train, const Dataset& val, int64_t vocab_size,
                             const std::string& val_source) {
  const DataInfo& b = val.info();
  if (b.task != Task::kLanguageModel || b.max_token_id < 0) return absl::OkStatus();
  const int64_t v = vocab_size > 0 ? vocab_size : train.info().num_outputs;
  if (b.max_token_id < v) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      val_source, " holds token id ", b.max_token_id, ", outside the model's vocabulary of V=", v,
      vocab_size > 0 ? " (--vocab-size)" : absl::StrCat(" (without --vocab-size: what --data holds, ", train.Describe(), ")"),
      ": use --vocab-size=", b.max_token_id + 1, " or more, or held-out data of the same tokenizer"));
}

absl::StatusOr<std::string> ResolveFormat(const std::string& format, const std::string& path, const std::string& flag) {
  if (format != "auto") return format;
  return DetectFormat(path, flag);
}

// fashion-mnist[:DIR] -> the IDX images file (train or t10k), 28 x 28.
void ExpandFashionMnist(DataOptions* o, bool train) {
  if (!IsFashionMnistName(o->path)) return;
  o->name = absl::StrCat("fashion-mnist ", train ? "train" : "t10k");
  o->path = FashionMnistImages(FashionMnistDir(o->path), train);
  if (o->image_height == 0) o->image_height = 28;
  if (o->image_width == 0) o->image_width = 28;
}

}  // namespace

absl::StatusOr<OpenedData> Open(const DataOptions& options) {
  if (options.format != "auto" && !Datasets().Contains(options.format)) {
    return absl::InvalidArgumentError(absl::StrCat("--data-format=", options.format, " is not known (known: auto, ",
                                                   absl::StrJoin(Datasets().Names(), ", "), ")"));
  }
  if (!(options.val_fraction >= 0 && options.val_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--val-fraction is ", options.val_fraction, ", expected a fraction in [0, 1)"));
  }
  if (options.val_fraction > 0 && !options.val_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--val-data=", options.val_path, " and --val-fraction=",
                                                   options.val_fraction, " both name a held-out set: pass one"));
  }

  OpenedData out;
  DataOptions train = options;
  train.part = options.val_fraction > 0 ? DataPart::kHead : DataPart::kWhole;
  train.flag = "--data";
  const bool fashion = IsFashionMnistName(options.path);
  ExpandFashionMnist(&train, /*train=*/true);
  if (fashion && options.format != "auto" && options.format != "idx") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data=", options.path, " is IDX data, but --data-format=", options.format, " (use auto or idx)"));
  }
  PSYNC_ASSIGN_OR_RETURN(out.format, ResolveFormat(options.format, train.path, train.flag));
  PSYNC_ASSIGN_OR_RETURN(out.train, Datasets().Create(out.format, train));

  DataOptions val = train;
  val.shuffle = false;
  std::string val_source;
  if (!options.val_path.empty()) {
    val.path = options.val_path;
    val.flag = "--val-data";
    val.name.clear();
    val.part = DataPart::kWhole;
    ExpandFashionMnist(&val, /*train=*/false);
    val_source = absl::StrCat("--val-data ", val.path);
  } else if (options.val_fraction > 0) {
    val.part = DataPart::kTail;
    val_source = absl::StrCat("the tail of --data ", train.path);
  } else if (fashion) {
    val.path = options.path;
    val.name.clear();
    ExpandFashionMnist(&val, /*train=*/false);
    val_source = absl::StrCat("fashion-mnist t10k ", val.path);
  } else {
    return out;
  }
  std::string val_format = out.format;
  if (!options.val_path.empty()) {
    PSYNC_ASSIGN_OR_RETURN(val_format, ResolveFormat(options.format, val.path, val.flag));
  }
  PSYNC_ASSIGN_OR_RETURN(out.val, Datasets().Create(val_format, val));
  PSYNC_RETURN_IF_ERROR(CheckCompatible(*out.train, *out.val, val_source));
  PSYNC_RETURN_IF_ERROR(CheckHeldOutIds(*out.train, *out.val, options.vocab_size, val_source));
  return out;
}

}  // namespace psync::data
