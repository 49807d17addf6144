#include "worker/runtime/job_fingerprint.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "worker/checkpoint/model_config.h"

namespace psync::runtime {
namespace {

// FNV-1a, 64 bits: a fingerprint, not a defence against forgery (ranks
// are the user's own processes; a collision only misses a mistake).
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
void Mix(uint64_t* h, const void* bytes, size_t n) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < n; ++i) {
    *h ^= p[i];
    *h *= 1099511628211ull;
  }
}
void Mix(uint64_t* h, const Tensor& t) {
  if (t.defined()) Mix(h, t.raw_data(), t.nbytes());
}

// Examples read for the hash: a few at each end, bounded so a rank with a
// huge data set spends microseconds on it.
constexpr int64_t kSampledExamples = 4;

// The model's configuration as a checkpoint records it: each key under
// the flag that sets it ("block_size" -> "--block-size", the model's own
// "flag.n-head" -> "--n-head"); keys the data decides (input_shape,
// num_classes) under "model.<key>".
void AddModel(const WorkerOptions& opt, const nn::ModelOptions& model, JobSettings* out) {
  static const char* const kFlagKeys[] = {"widths", "vocab_size", "block_size", "seed"};
  out->emplace_back("--model", opt.model);
  for (const auto& [key, value] : checkpoint::EncodeModelConfig(model)) {
    const bool flag = std::find(std::begin(kFlagKeys), std::end(kFlagKeys), key) != std::end(kFlagKeys);
    if (absl::StartsWith(key, checkpoint::kModelFlagPrefix)) {  // a registered model's own flag, dashed already
      out->emplace_back(absl::StrCat("--", key.substr(sizeof(checkpoint::kModelFlagPrefix) - 1)), value);
      continue;
    }
    out->emplace_back(flag ? absl::StrCat("--", absl::StrReplaceAll(key, {{"_", "-"}})) : "model." + key, value);
  }
  out->emplace_back(opt.model == "gpt" ? "--skip-block" : "--skip-layer", absl::StrCat(opt.skip_layer));
  out->emplace_back("--skip-pattern", SkipPatternName(opt.skip_pattern));
}

void AddOptimisation(const WorkerOptions& opt, JobSettings* out) {
  out->emplace_back("--steps", absl::StrCat(opt.steps));
  out->emplace_back("--accumulate", absl::StrCat(opt.accumulate));
  out->emplace_back("--optimizer", opt.optimizer);
  out->emplace_back("--lr", ExactDouble(opt.lr));
  out->emplace_back("--momentum", ExactDouble(opt.momentum));
  out->emplace_back("--weight-decay", ExactDouble(opt.weight_decay));
  out->emplace_back("--beta1", ExactDouble(opt.beta1));
  out->emplace_back("--beta2", ExactDouble(opt.beta2));
  out->emplace_back("--eps", ExactDouble(opt.eps));
  out->emplace_back("--clip-grad-norm", ExactDouble(opt.clip_grad_norm));
  out->emplace_back("--lr-schedule", opt.lr_schedule);
  out->emplace_back("--warmup-steps", absl::StrCat(opt.warmup_steps));
  out->emplace_back("--precision", opt.precision);
  out->emplace_back("--zero", absl::StrCat(opt.zero));
  if (opt.zero == 3) {
    // They decide the order of the parameter gathers, which every rank must issue alike.
    out->emplace_back("--zero3-prefetch", absl::StrCat(opt.zero3_prefetch));
    out->emplace_back("--reshard-after-forward", opt.reshard_after_forward ? "true" : "false");
  }
  out->emplace_back("--grad-compression", opt.grad_compression);
  out->emplace_back("--find-unused-parameters", opt.find_unused_parameters ? "true" : "false");
}

// A value longer than this is sent as its head and a hash: the wire takes
// at most 1 KiB per value (coordinator.proto "Limits"), and a long --widths
// or an error text must not make the Join itself invalid.
constexpr size_t kMaxValueBytes = 240;

std::string Bounded(std::string v) {
  if (v.size() <= kMaxValueBytes) return v;
  uint64_t h = kFnvOffset;
  Mix(&h, v.data(), v.size());
  return absl::StrFormat("%s... (%d bytes, hash %016x)", v.substr(0, kMaxValueBytes / 2), v.size(), h);
}

}  // namespace

std::string ExactDouble(double v) {
  for (int digits = 6; digits < 17; ++digits) {
    std::string s = absl::StrFormat("%.*g", digits, v);
    if (std::strtod(s.c_str(), nullptr) == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

std::string DataIdentity(const data::Dataset& data) {
  const data::DataInfo& info = data.info();
  const int64_t n = data.num_examples();
  uint64_t h = kFnvOffset;
  const int64_t head = std::min(n, kSampledExamples);
  const int64_t tail_begin = std::max(head, n - kSampledExamples);
  for (auto [begin, count] : {std::pair<int64_t, int64_t>{0, head}, {tail_begin, n - tail_begin}}) {
    if (count <= 0) continue;
    absl::StatusOr<data::Batch> b = data.Examples(begin, count);
    if (!b.ok()) return absl::StrCat("unreadable: ", b.status().message());
    Mix(&h, b->inputs);
    Mix(&h, b->targets);
  }
  return absl::StrFormat("%s, %d examples of [%s], %d outputs, hash %016x", data::TaskName(info.task), n,
                         absl::StrJoin(info.example_shape, ","), info.num_outputs, h);
}

JobSettings JobFingerprint(const WorkerOptions& opt, const nn::ModelOptions& model, const data::Dataset& train,
                           const data::Dataset* val) {
  JobSettings out;
  AddModel(opt, model, &out);
  AddOptimisation(opt, &out);
  out.emplace_back("--shuffle", opt.data.shuffle ? "true" : "false");
  out.emplace_back("data", DataIdentity(train));
  // Evaluation is collective (every rank takes its slice of the held-out
  // examples), so when and on what it runs must agree too.
  out.emplace_back("val data", val ? DataIdentity(*val) : "none");
  out.emplace_back("--eval-every", absl::StrCat(opt.eval_every));
  out.emplace_back("--eval-examples", absl::StrCat(opt.eval_examples));
  out.emplace_back("--eval-batch", absl::StrCat(opt.eval_batch));
  for (auto& [name, value] : out) value = Bounded(std::move(value));
  return out;
}

}  // namespace psync::runtime
