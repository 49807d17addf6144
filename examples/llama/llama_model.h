// A Llama-style decoder as a psync model (--model=llama):
//   x = embed_tokens[ids]                                   (no position embedding)
//   per layer: x += o_proj(GQA-attention(RoPE(q), RoPE(k), v) of input_layernorm(x))
//              x += down_proj(silu(gate_proj(h)) * up_proj(h)), h = post_attention_layernorm(x)
//   logits = lm_head(norm(x))                               (untied, no bias anywhere)
// Parameter names follow HF Llama without the "model." prefix.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <psync/psync.h>

namespace llama {

struct LlamaConfig {
  int64_t vocab_size = 0, block_size = 0, n_layer = 0, n_head = 0, n_kv_head = 0, n_embd = 0, ffn_hidden = 0;
  double rope_theta = 10000.0;
  double eps = 1e-5;  // RMSNorm's
  int64_t head_dim() const { return n_embd / n_head; }
};

// --ffn-hidden=0: Llama's rule, 2/3 of 4C rounded up to a multiple of 32 (Llama
// rounds to 256 at its sizes; 32 keeps toy models small): C=32 -> 96.
int64_t DefaultFfnHidden(int64_t n_embd);
// OK, or InvalidArgument naming the flag at fault.
absl::Status ValidateConfig(const LlamaConfig& c);

// One parameter: its name, shape and initial distribution.
struct ParamSpec {
  enum Init { kNormal, kNormalResidual, kOnes };  // N(0, .02); N(0, .02/sqrt(2L)); 1
  std::string name;
  psync::Shape shape;
  Init init;
};
// Every parameter in registration order: embed_tokens, then per layer
// input_layernorm, q/k/v/o_proj, post_attention_layernorm, gate/up/down_proj
// (kParamsPerLayer of them), then norm and lm_head.
constexpr int64_t kParamsPerLayer = 9;
std::vector<ParamSpec> ParameterSpecs(const LlamaConfig& c);

// The forward on parameter values given in ParameterSpecs order (the model's
// own parameters, or GradCheck's float64 inputs): ids [B, T] int64 ->
// logits [B, T, V]. Layers in `skip` are the identity.
psync::autograd::Variable LlamaForward(const LlamaConfig& c, const std::vector<psync::autograd::Variable>& params,
                                       const psync::Tensor& ids, const std::set<int>& skip = {});

// The flags of --model=llama and its registration (factory included).
psync::nn::ModelRegistration LlamaRegistration();

}  // namespace llama
