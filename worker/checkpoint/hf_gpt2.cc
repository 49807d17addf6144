#include "worker/checkpoint/hf_gpt2.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/json.h"
#include "psync/common/status_macros.h"

namespace psync::checkpoint {
namespace {

// A block's parameters in psync's order; `conv1d`: stored [in, out] by HF.
struct BlockParam {
  const char* name;
  bool conv1d;
};
constexpr BlockParam kBlockParams[] = {
    {"ln_1.weight", false},        {"ln_1.bias", false},        {"attn.c_attn.weight", true},
    {"attn.c_attn.bias", false},   {"attn.c_proj.weight", true}, {"attn.c_proj.bias", false},
    {"ln_2.weight", false},        {"ln_2.bias", false},        {"mlp.c_fc.weight", true},
    {"mlp.c_fc.bias", false},      {"mlp.c_proj.weight", true},  {"mlp.c_proj.bias", false},
};

// "h.<i>.<rest>": i and rest; false for other names.
bool SplitBlockName(const std::string& name, int64_t* index, std::string* rest) {
  if (!absl::StartsWith(name, "h.")) return false;
  const size_t dot = name.find('.', 2);
  if (dot == std::string::npos) return false;
  *rest = name.substr(dot + 1);
  return absl::SimpleAtoi(absl::string_view(name).substr(2, dot - 2), index) && *index >= 0;
}

bool IsBuffer(const std::string& name) {
  int64_t i = 0;
  std::string rest;
  return SplitBlockName(name, &i, &rest) && (rest == "attn.bias" || rest == "attn.masked_bias");
}

std::string StripPrefix(const std::string& name) {
  return absl::StartsWith(name, kHfPrefix) ? name.substr(sizeof(kHfPrefix) - 1) : name;
}

// The number of blocks h.0 .. h.(L-1) among `names` (each index once); an
// error names a gap.
absl::StatusOr<int64_t> CountBlocks(const std::vector<std::string>& names, const std::string& path) {
  std::set<int64_t> seen;
  for (const std::string& n : names) {
    int64_t i = 0;
    std::string rest;
    if (SplitBlockName(n, &i, &rest)) seen.insert(i);
  }
  const auto layers = static_cast<int64_t>(seen.size());
  if (!seen.empty() && *seen.rbegin() != layers - 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the blocks are not h.0 .. h.", layers - 1, " (found h.",
                                                   *seen.rbegin(), ")"));
  }
  return layers;
}

absl::StatusOr<Tensor> AsFloat32(const Tensor& t, const std::string& name, const std::string& path) {
  if (t.dtype() == kFloat32) return t;
  if (t.dtype() == kFloat16 || t.dtype() == kBFloat16) return t.To(kFloat32);
  return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' is ", DTypeName(t.dtype()),
                                                 ", expected float32, float16 or bfloat16"));
}

// n_head from config.json beside `path`, after checking that the file asks
// for nothing psync's GPT does differently. 0 when there is no config.json.
absl::StatusOr<int64_t> ReadHfConfig(const std::string& path) {
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "config.json";
  std::error_code ec;
  if (!std::filesystem::exists(config, ec)) return int64_t{0};
  std::ifstream f(config);
  std::ostringstream s;
  s << f.rdbuf();
  const std::string where = config.string();
  PSYNC_ASSIGN_OR_RETURN(json::Json c, json::Parse(s.str()));
  auto refuse = [&](const std::string& key, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", key, "\" is ", c[key].dump(), "; ", why));
  };
  if (!c.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": expected a JSON object"));
  if (c.contains("activation_function") && c["activation_function"] != "gelu_new" &&
      c["activation_function"] != "gelu_pytorch_tanh") {
    return refuse("activation_function", "psync's GPT uses GELU with the tanh approximation (gelu_new)");
  }
  if (c.contains("layer_norm_epsilon") && !(c["layer_norm_epsilon"].is_number() && c["layer_norm_epsilon"] == 1e-5)) {
    return refuse("layer_norm_epsilon", "psync's GPT uses 1e-5");
  }
  if (c.contains("scale_attn_weights") && c["scale_attn_weights"] == false) {
    return refuse("scale_attn_weights", "psync's GPT scales attention by 1/sqrt(head size)");
  }
  if (c.contains("scale_attn_by_inverse_layer_idx") && c["scale_attn_by_inverse_layer_idx"] == true) {
    return refuse("scale_attn_by_inverse_layer_idx", "psync's GPT does not scale attention by layer");
  }
  if (!c.contains("n_head")) return int64_t{0};
  if (!c["n_head"].is_number_integer() || c["n_head"].get<int64_t>() < 1) {
    return refuse("n_head", "expected a positive integer");
  }
  return c["n_head"].get<int64_t>();
}

}  // namespace

bool LooksLikeHfGpt2(const NamedTensors& tensors) {
  Shape wte, c_attn;
  for (const auto& [raw, t] : tensors) {
    const std::string name = StripPrefix(raw);
    if (name != raw || name == "lm_head.weight" || IsBuffer(name)) return true;
    if (name == "wte.weight") wte = t.shape();
    if (name == "h.0.attn.c_attn.weight") c_attn = t.shape();
  }
  return wte.size() == 2 && c_attn.size() == 2 && c_attn[0] == wte[1] && c_attn[1] == 3 * wte[1];
}

absl::StatusOr<NamedTensors> FromHfGpt2(NamedTensors tensors, const std::map<std::string, std::string>& metadata,
                                        const std::string& path, ModelRecord* model) {
  std::map<std::string, Tensor> by_name;
  std::vector<std::string> names;
  Tensor lm_head;
  for (auto& [raw, t] : tensors) {
    std::string name = StripPrefix(raw);
    if (IsBuffer(name)) continue;
    PSYNC_ASSIGN_OR_RETURN(Tensor f, AsFloat32(t, raw, path));
    if (name == "lm_head.weight") {
      lm_head = f;
      continue;
    }
    if (!by_name.emplace(name, f).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' is there with and without the '",
                                                     kHfPrefix, "' prefix"));
    }
    names.push_back(name);
  }
  auto take = [&](const std::string& name, const Shape& want, bool conv1d) -> absl::StatusOr<Tensor> {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": GPT-2 tensor '", name, "' is missing"));
    }
    Tensor t = it->second;
    by_name.erase(it);
    const Shape stored = conv1d ? Shape{want[1], want[0]} : want;
    if (t.shape() != stored) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' is ", ShapeToString(t.shape()),
                                                     ", expected ", ShapeToString(stored),
                                                     conv1d ? " (HF's Conv1D layout [in, out])" : ""));
    }
    return conv1d ? t.Transpose(0, 1).Contiguous() : t;
  };
  auto wte_it = by_name.find("wte.weight");
  auto wpe_it = by_name.find("wpe.weight");
  if (wte_it == by_name.end() || wpe_it == by_name.end() || wte_it->second.dim() != 2 || wpe_it->second.dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a GPT-2 checkpoint in Hugging Face's layout: expected wte.weight [V, C] and ",
                     "wpe.weight [T, C] (with or without the '", kHfPrefix, "' prefix)"));
  }
  const int64_t V = wte_it->second.size(0), C = wte_it->second.size(1), T = wpe_it->second.size(0);
  PSYNC_ASSIGN_OR_RETURN(int64_t L, CountBlocks(names, path));
  NamedTensors out;
  PSYNC_ASSIGN_OR_RETURN(Tensor wte, take("wte.weight", {V, C}, false));
  out.emplace_back("wte.weight", wte);
  PSYNC_ASSIGN_OR_RETURN(Tensor wpe, take("wpe.weight", {T, C}, false));
  out.emplace_back("wpe.weight", wpe);
  for (int64_t i = 0; i < L; ++i) {
    const std::map<std::string, Shape> shapes = {
        {"attn.c_attn.weight", {3 * C, C}}, {"attn.c_attn.bias", {3 * C}}, {"attn.c_proj.weight", {C, C}},
        {"mlp.c_fc.weight", {4 * C, C}},    {"mlp.c_fc.bias", {4 * C}},    {"mlp.c_proj.weight", {C, 4 * C}}};
    for (const BlockParam& p : kBlockParams) {
      const std::string name = absl::StrCat("h.", i, ".", p.name);
      auto s = shapes.find(p.name);
      PSYNC_ASSIGN_OR_RETURN(Tensor t, take(name, s == shapes.end() ? Shape{C} : s->second, p.conv1d));
      out.emplace_back(name, t);
    }
  }
  for (const char* name : {"ln_f.weight", "ln_f.bias"}) {
    PSYNC_ASSIGN_OR_RETURN(Tensor t, take(name, {C}, false));
    out.emplace_back(name, t);
  }
  if (!by_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unexpected tensor '", by_name.begin()->first,
                                                   "' (not part of GPT-2's layout)"));
  }
  if (lm_head.defined() && (lm_head.shape() != wte.shape() || lm_head.ToVector() != wte.ToVector())) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": lm_head.weight differs from wte.weight; psync's GPT ties ",
                                                   "its head to the token embedding, so an untied head cannot load"));
  }
  // psync-export records the head count: as the GPT's flag (0.9 on) or as
  // the older field.
  int64_t n_head = 0;
  for (const std::string& key : {absl::StrCat(kModelConfigPrefix, kModelFlagPrefix, "n-head"),
                                absl::StrCat(kModelConfigPrefix, "n_head")}) {
    auto meta = metadata.find(key);
    if (meta != metadata.end() && absl::SimpleAtoi(meta->second, &n_head) && n_head > 0) break;
    n_head = 0;
  }
  if (n_head > 0) {
    PSYNC_RETURN_IF_ERROR(ReadHfConfig(path).status());
  } else {
    PSYNC_ASSIGN_OR_RETURN(n_head, ReadHfConfig(path));
  }
  const std::string flag = kModelFlagPrefix;
  model->kind = "gpt";
  model->config = {{"vocab_size", absl::StrCat(V)}, {"block_size", absl::StrCat(T)},
                   {flag + "n-layer", absl::StrCat(L)}, {flag + "n-embd", absl::StrCat(C)}};
  // Unknown (no config.json, no record): left out, so a reader asks for --n-head.
  if (n_head > 0) model->config[flag + "n-head"] = absl::StrCat(n_head);
  return out;
}

absl::StatusOr<NamedTensors> ToHfGpt2(const NamedTensors& params) {
  std::map<std::string, Tensor> by_name(params.begin(), params.end());
  std::vector<std::string> names;
  for (const auto& [name, t] : params) names.push_back(name);
  PSYNC_ASSIGN_OR_RETURN(int64_t L, CountBlocks(names, "the model"));
  std::vector<std::pair<std::string, bool>> order = {{"wte.weight", false}, {"wpe.weight", false}};
  for (int64_t i = 0; i < L; ++i) {
    for (const BlockParam& p : kBlockParams) order.emplace_back(absl::StrCat("h.", i, ".", p.name), p.conv1d);
  }
  order.emplace_back("ln_f.weight", false);
  order.emplace_back("ln_f.bias", false);
  NamedTensors out;
  for (const auto& [name, conv1d] : order) {
    auto it = by_name.find(name);
    if (it == by_name.end()) return absl::InvalidArgumentError(absl::StrCat("GPT parameter '", name, "' is missing"));
    out.emplace_back(absl::StrCat(kHfPrefix, name), conv1d ? it->second.Transpose(0, 1).Contiguous() : it->second);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", by_name.begin()->first, "' is not part of a GPT"));
  }
  return out;
}

absl::StatusOr<std::string> HfGpt2Config(const nn::ModelOptions& o) {
  PSYNC_ASSIGN_OR_RETURN(const int64_t n_embd, o.flags.Int("n-embd"));
  PSYNC_ASSIGN_OR_RETURN(const int64_t n_layer, o.flags.Int("n-layer"));
  PSYNC_ASSIGN_OR_RETURN(const int64_t n_head, o.flags.Int("n-head"));
  json::Json c = json::Json::object();
  c["architectures"] = json::Json::array({"GPT2LMHeadModel"});
  c["model_type"] = "gpt2";
  c["vocab_size"] = o.vocab_size;
  c["n_positions"] = o.block_size;
  c["n_ctx"] = o.block_size;
  c["n_embd"] = n_embd;
  c["n_layer"] = n_layer;
  c["n_head"] = n_head;
  c["n_inner"] = nullptr;
  c["activation_function"] = "gelu_new";
  c["layer_norm_epsilon"] = 1e-5;
  c["resid_pdrop"] = 0.0;
  c["embd_pdrop"] = 0.0;
  c["attn_pdrop"] = 0.0;
  c["initializer_range"] = 0.02;
  c["scale_attn_weights"] = true;
  c["scale_attn_by_inverse_layer_idx"] = false;
  c["reorder_and_upcast_attn"] = false;
  c["tie_word_embeddings"] = true;
  c["torch_dtype"] = "float32";
  return json::Serialize(c, /*pretty=*/true) + "\n";
}

}  // namespace psync::checkpoint
