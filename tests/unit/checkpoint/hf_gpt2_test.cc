// checkpoint/hf_gpt2.h and ReadModelWeights on Hugging Face's GPT-2 layout:
// a psync GPT written in HF's layout reads back to the same parameters (with
// and without the "transformer." prefix, buffers and a tied lm_head; F16
// widened), detection, and the refusals (untied head, bad shapes, missing
// tensors, a config.json asking for other math).
#include "worker/checkpoint/hf_gpt2.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "tests/common/temp_dir.h"
#include "worker/checkpoint/weights.h"
#include "worker/nn/models/gpt.h"
#include "worker/safetensors/safetensors.h"

namespace psync::checkpoint {
namespace {

using test_support::TempDir;

NamedTensors GptParams() {
  nn::GptConfig c;
  c.vocab_size = 50;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 12;
  nn::GPT gpt(c, Device::CPU(), /*seed=*/9);
  NamedTensors out;
  for (const auto& [name, p] : gpt.named_parameters()) out.emplace_back(name, p.data().Clone());
  return out;
}

void ExpectSame(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.shape(), b[i].second.shape()) << a[i].first;
    EXPECT_EQ(a[i].second.ToVector(), b[i].second.ToVector()) << a[i].first;
  }
}

const Tensor& Find(const NamedTensors& t, const std::string& name) {
  for (const auto& [n, v] : t) {
    if (n == name) return v;
  }
  static Tensor none;
  ADD_FAILURE() << "no " << name;
  return none;
}

TEST(HfGpt2, ExportedLayoutReadsBackExactly) {
  const NamedTensors params = GptParams();
  absl::StatusOr<NamedTensors> hf = ToHfGpt2(params);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->front().first, "transformer.wte.weight");
  // Conv1D: [in, out], the transpose of psync's Linear [out, in].
  const Tensor& c_attn = Find(*hf, "transformer.h.1.attn.c_attn.weight");
  EXPECT_EQ(c_attn.shape(), (Shape{12, 36}));
  EXPECT_EQ(c_attn.ToVector(), Find(params, "h.1.attn.c_attn.weight").Transpose(0, 1).Contiguous().ToVector());
  EXPECT_TRUE(LooksLikeHfGpt2(*hf));
  EXPECT_FALSE(LooksLikeHfGpt2(params));
  ModelRecord model;
  absl::StatusOr<NamedTensors> back = FromHfGpt2(*hf, {}, "/nowhere/model.safetensors", &model);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(*back, params);
  EXPECT_EQ(model.kind, "gpt");
  EXPECT_EQ(model.config, (std::map<std::string, std::string>{
                              {"vocab_size", "50"}, {"block_size", "8"}, {"flag.n-layer", "2"}, {"flag.n-embd", "12"}}))
      << "no config.json and no record: the head count is left out, so readers ask for --n-head";
}

TEST(HfGpt2, HubLayoutWithBuffersTiedHeadAndHalfPrecision) {
  TempDir dir("psync_hf");
  const NamedTensors params = GptParams();
  NamedTensors hub;  // the hub's gpt2 files: no prefix, buffers, F16 here
  const NamedTensors hf = *ToHfGpt2(params);
  for (const auto& [name, t] : hf) {
    const std::string plain = name.substr(sizeof(kHfPrefix) - 1);
    hub.emplace_back(plain, t.To(kFloat16));
    if (plain.size() > 12 && plain.substr(plain.size() - 12) == ".ln_1.weight") {
      const std::string block = plain.substr(0, plain.size() - 12);
      hub.emplace_back(block + ".attn.bias", Tensor::Zeros({1, 1, 8, 8}));
      hub.emplace_back(block + ".attn.masked_bias", Tensor::Scalar(-1e4f));
    }
  }
  hub.emplace_back("lm_head.weight", Find(params, "wte.weight").To(kFloat16));
  const std::string path = dir.File("model.safetensors");
  ASSERT_TRUE(safetensors::Write(path, hub).ok());
  std::ofstream(dir.File("config.json")) << R"({"n_head": 2, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05})";
  absl::StatusOr<ModelWeights> w = ReadModelWeights(path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->hf_layout);
  EXPECT_EQ(w->model.config.at("flag.n-head"), "2");
  ASSERT_EQ(w->params.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(w->params[i].first, params[i].first);
    EXPECT_EQ(w->params[i].second.dtype(), kFloat32);
    EXPECT_EQ(w->params[i].second.ToVector(), params[i].second.To(kFloat16).To(kFloat32).ToVector());
  }
  // Named as psync's, the layout is not converted: the Conv1D shapes show.
  EXPECT_FALSE(ReadModelWeights(path, WeightsFormat::kPsync)->hf_layout);
}

TEST(HfGpt2, RefusalsNameTheFileAndTheTensor) {
  TempDir dir("psync_hf");
  const NamedTensors hf = *ToHfGpt2(GptParams());
  auto read = [&](NamedTensors t, const std::string& config = "") {
    const std::string path = dir.File("model.safetensors");
    EXPECT_TRUE(safetensors::Write(path, t).ok());
    std::remove(dir.File("config.json").c_str());
    if (!config.empty()) std::ofstream(dir.File("config.json")) << config;
    return std::string(ReadModelWeights(path, WeightsFormat::kHf).status().message());
  };
  const std::string file = dir.File("model.safetensors");
  NamedTensors untied = hf;
  Tensor head = Find(hf, "transformer.wte.weight").Clone();
  head.data<float>()[3] += 1;
  untied.emplace_back("lm_head.weight", head);
  EXPECT_EQ(read(untied), file + ": lm_head.weight differs from wte.weight; psync's GPT ties its head to the token "
                                 "embedding, so an untied head cannot load");
  NamedTensors missing(hf.begin(), hf.end() - 1);  // no ln_f.bias
  EXPECT_EQ(read(missing), file + ": GPT-2 tensor 'ln_f.bias' is missing");
  NamedTensors wrong = hf;
  for (auto& [n, t] : wrong) {
    if (n == "transformer.h.0.mlp.c_fc.weight") t = t.Transpose(0, 1).Contiguous();  // psync's [out, in]
  }
  EXPECT_EQ(read(wrong), file + ": tensor 'h.0.mlp.c_fc.weight' is [48, 12], expected [12, 48] (HF's Conv1D layout [in, out])");
  NamedTensors extra = hf;
  extra.emplace_back("transformer.h.0.attn.rotary", Tensor::Zeros({2}));
  EXPECT_EQ(read(extra), file + ": unexpected tensor 'h.0.attn.rotary' (not part of GPT-2's layout)");
  EXPECT_EQ(read(hf, R"({"activation_function": "relu"})"),
            dir.File("config.json") + ": \"activation_function\" is \"relu\"; psync's GPT uses GELU with the tanh "
                                      "approximation (gelu_new)");
  EXPECT_NE(read(hf, R"({"scale_attn_by_inverse_layer_idx": true})").find("does not scale attention by layer"),
            std::string::npos);
  EXPECT_EQ(read({{"x", Tensor::Zeros({2})}}),
            file + ": not a GPT-2 checkpoint in Hugging Face's layout: expected wte.weight [V, C] and wpe.weight "
                   "[T, C] (with or without the 'transformer.' prefix)");
  EXPECT_EQ(ParseWeightsFormat("gguf").status().message(),
            "'gguf' is not a weights format (auto, psync, or hf: a GPT-2 in Hugging Face's layout)");
}

}  // namespace
}  // namespace psync::checkpoint
