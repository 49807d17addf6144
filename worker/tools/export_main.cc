// psync-export: writes a model's weights in another layout
// (docs/cli-contract.md "psync-export"):
//
//   --format=hf     a directory Hugging Face's transformers loads
//                   (GPT2LMHeadModel.from_pretrained(DIR)): model.safetensors
//                   in save_pretrained's GPT-2 layout (checkpoint/hf_gpt2.h)
//                   and config.json;
//   --format=psync  a weights-only psync checkpoint (what --save writes),
//                   e.g. from a Hugging Face GPT-2.
//
// The input is anything psync-sample and --init read (a --save file, a
// checkpoint, a state dict, an HF GPT-2 file), through
// checkpoint::ReadModelWeights.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/flags.h"
#include "worker/checkpoint/hf_gpt2.h"
#include "worker/checkpoint/model_config.h"
#include "worker/checkpoint/weights.h"
#include "worker/checkpoint/writer.h"
#include "worker/safetensors/safetensors.h"

ABSL_FLAG(std::string, checkpoint, "", "the weights to export: a --save file, a checkpoint, a state dict, an HF GPT-2 file");
ABSL_FLAG(std::string, input_format, "auto", "auto | psync | hf: how --checkpoint is laid out");
ABSL_FLAG(std::string, format, "hf", "hf (a directory for transformers) | psync (a weights-only checkpoint)");
ABSL_FLAG(std::string, out, "", "hf: the directory to write; psync: the file");
ABSL_FLAG(int64_t, n_head, 0, "gpt: the head count when the input does not record it (0 = from the input)");

namespace {

constexpr char kProgram[] = "psync-export";

[[noreturn]] void Fail(const std::string& message, int code = 2) {
  std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
  std::exit(code);
}

template <typename T>
T OrFail(absl::StatusOr<T> v, const std::string& context) {
  if (!v.ok()) Fail(absl::StrCat(context, v.status().message()));
  return *std::move(v);
}

void OrFail(const absl::Status& st, const std::string& context) {
  if (!st.ok()) Fail(absl::StrCat(context, st.message()));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace psync;
  ParseFlagsOrExit(kProgram, "psync-export --checkpoint=FILE --format=hf|psync --out=PATH [--n-head=H]", argc, argv,
                   FlagsDefinedIn(__FILE__));
  const std::string in = absl::GetFlag(FLAGS_checkpoint);
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (in.empty()) Fail("--checkpoint is required");
  if (out.empty()) Fail("--out is required");
  if (format != "hf" && format != "psync") Fail(absl::StrCat("--format=", format, ": expected hf or psync"));
  const auto input_format = OrFail(checkpoint::ParseWeightsFormat(absl::GetFlag(FLAGS_input_format)), "--input-format: ");

  checkpoint::ModelWeights w = OrFail(checkpoint::ReadModelWeights(in, input_format), "--checkpoint: ");
  if (w.model.kind.empty() && w.hf_layout) w.model.kind = "gpt";
  if (w.model.kind.empty()) {
    Fail(absl::StrCat(in, ": the file does not say which model it holds (no 'model' metadata): export a --save file ",
                      "or a checkpoint"));
  }
  nn::ModelOptions mo = OrFail(checkpoint::DecodeModelConfig(w.model, in), "");
  if (absl::GetFlag(FLAGS_n_head) > 0) mo.flags.Set("n-head", absl::StrCat(absl::GetFlag(FLAGS_n_head)));

  if (w.model.kind == "gpt" && !mo.flags.Has("n-head")) Fail(absl::StrCat(in, ": the head count is not recorded; pass --n-head"));
  if (format == "psync") {
    checkpoint::CheckpointContents c;
    c.manifest.model = w.model.kind;
    c.manifest.model_config = checkpoint::EncodeModelConfig(mo);
    c.manifest.world_size = 1;
    c.params = std::move(w.params);
    const uint64_t bytes = OrFail(checkpoint::WriteCheckpointFile(out, c), "--out: ");
    std::printf("%s: wrote %s (a weights-only psync checkpoint of model %s, %llu bytes)\n", kProgram, out.c_str(),
                w.model.kind.c_str(), static_cast<unsigned long long>(bytes));
    return 0;
  }
  if (w.model.kind != "gpt") Fail(absl::StrCat(in, ": holds a '", w.model.kind, "' model; --format=hf writes GPT-2s"));
  const NamedTensors hf = OrFail(checkpoint::ToHfGpt2(w.params), absl::StrCat(in, ": "));
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) Fail(absl::StrCat("--out ", out, ": cannot create the directory: ", ec.message()));
  // "format": "pt" is what transformers checks; the psync model record lets
  // psync-sample rebuild the model from the file alone.
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {checkpoint::kModelKindKey, "gpt"}};
  for (const auto& [k, v] : checkpoint::EncodeModelConfig(mo)) metadata[checkpoint::kModelConfigPrefix + k] = v;
  const std::string model_path = (std::filesystem::path(out) / "model.safetensors").string();
  OrFail(safetensors::Write(model_path, hf, metadata), "--out: ");
  const std::string config = OrFail(checkpoint::HfGpt2Config(mo), absl::StrCat(in, ": "));
  OrFail(WriteFileAtomically((std::filesystem::path(out) / "config.json").string(), config), "--out: ");
  std::printf("%s: wrote %s and config.json (GPT-2 in Hugging Face's layout: L=%s, H=%s, C=%s, V=%lld, T=%lld)\n",
              kProgram, model_path.c_str(), mo.flags.values().at("n-layer").c_str(),
              mo.flags.values().at("n-head").c_str(), mo.flags.values().at("n-embd").c_str(),
              static_cast<long long>(mo.vocab_size), static_cast<long long>(mo.block_size));
  return 0;
}
