#include "llama_model.h"

#include <cmath>
#include <utility>

#include "repeat_kv.h"
#include "rms_norm.h"
#include "rope.h"
#include "silu.h"

namespace llama {
namespace {

using psync::Shape;
using psync::Tensor;
using psync::autograd::Variable;
namespace ag = psync::autograd;

constexpr float kInitStd = 0.02f;  // as psync's GPT (and HF's initializer_range)

std::string Str(int64_t v) { return std::to_string(v); }

// x [B, T, C] -> causal grouped-query self-attention [B, T, C]. p: the
// layer's q, k, v, o weights.
Variable Attention(const LlamaConfig& c, const Variable& x, const Variable* p) {
  const int64_t B = x.shape()[0], T = x.shape()[1], H = c.n_head, Hkv = c.n_kv_head, D = c.head_dim();
  const Variable none;  // no bias
  Variable q = Rope(ag::Reshape(ag::Linear(x, p[0], none), {B, T, H, D}), c.rope_theta);
  Variable k = Rope(ag::Reshape(ag::Linear(x, p[1], none), {B, T, Hkv, D}), c.rope_theta);
  Variable v = ag::Reshape(ag::Linear(x, p[2], none), {B, T, Hkv, D});
  // Each kv head serves H/Hkv consecutive query heads (repeat_interleave).
  k = RepeatKv(k, H / Hkv);
  v = RepeatKv(v, H / Hkv);
  auto heads = [](const Variable& t) { return ag::Permute(t, {0, 2, 1, 3}); };  // [B, H, T, D] views
  Variable y = ag::CausalAttention(heads(q), heads(k), heads(v), 1.0 / std::sqrt(static_cast<double>(D)));
  // y is a [B, H, T, D] view of [B, T, H, D] memory: joining the heads is free.
  return ag::Linear(ag::Reshape(ag::Permute(y, {0, 2, 1, 3}), {B, T, H * D}), p[3], none);
}

// The model psync trains: its parameters, registered flat under their
// dotted names, and LlamaForward over them.
class Llama : public psync::nn::Model {
 public:
  Llama(const LlamaConfig& c, psync::Device device, uint64_t seed) : c_(c) {
    const std::vector<ParamSpec> specs = ParameterSpecs(c);
    const float residual_std = kInitStd / std::sqrt(2.0f * static_cast<float>(c.n_layer));
    int64_t n = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const ParamSpec& s = specs[i];
      Tensor t;
      if (s.init == ParamSpec::kOnes) {
        t = Tensor::Full(s.shape, 1.0f, device);
      } else {
        // One seeded stream per tensor, in registration order (as the GPT).
        psync::nn::SplitMix64 rng(psync::nn::DeriveSeed(seed, i));
        const float sd = s.init == ParamSpec::kNormal ? kInitStd : residual_std;
        t = Tensor::FromVector(psync::nn::NormalValues(rng, psync::NumelOf(s.shape), 0.0f, sd), s.shape, device);
      }
      n += t.numel();
      params_.push_back(RegisterParameter(s.name, std::move(t)));
    }
    describe_ = "llama (L=" + Str(c.n_layer) + ", H=" + Str(c.n_head) + ", KV=" + Str(c.n_kv_head) +
                ", C=" + Str(c.n_embd) + ", F=" + Str(c.ffn_hidden) + ", V=" + Str(c.vocab_size) +
                ", T=" + Str(c.block_size) + "): " + Str(n) + " parameters";
  }

  Variable Forward(const Variable& ids, const std::set<int>& skip) override {
    const Tensor& t = ids.data();
    if (t.dim() != 2 || t.dtype() != psync::kInt64) {
      throw psync::TensorError("llama: expects token ids [B, T] int64 (--data-format=tokens or bytes), got " +
                               t.DebugString());
    }
    if (t.size(1) > c_.block_size) {
      throw psync::TensorError("llama: sequence length " + Str(t.size(1)) +
                               " exceeds --block-size=" + Str(c_.block_size));
    }
    if (absl::Status st = ValidateSkip(skip); !st.ok()) throw psync::TensorError(std::string(st.message()));
    // The parameters are this module's own and the forward reads them
    // directly: one forward scope around it (with --zero=3 the whole model is
    // gathered for the forward; child modules would gather layer by layer).
    psync::nn::ForwardScope scope(*this);
    return scope.Done({LlamaForward(c_, params_, t, skip)});
  }

  absl::Status ValidateSkip(const std::set<int>& skip) const override {
    for (int j : skip) {
      if (j < 0 || j >= c_.n_layer) {
        return absl::InvalidArgumentError("llama: cannot skip layer " + std::to_string(j) +
                                          ": the model has layers 0.." + Str(c_.n_layer - 1));
      }
    }
    return absl::OkStatus();
  }

  std::string Describe() const override { return describe_; }

 private:
  const LlamaConfig c_;
  std::vector<Variable> params_;  // ParameterSpecs order
  std::string describe_;
};

absl::StatusOr<std::unique_ptr<psync::nn::Model>> MakeLlama(const psync::nn::ModelOptions& o) {
  LlamaConfig c;
  // The data's vocabulary unless --vocab-size says (bytes: 256).
  c.vocab_size = o.vocab_size > 0 ? o.vocab_size : o.num_classes;
  c.block_size = o.block_size;
  PSYNC_ASSIGN_OR_RETURN(c.n_layer, o.flags.Int("n-layer"));
  PSYNC_ASSIGN_OR_RETURN(c.n_head, o.flags.Int("n-head"));
  PSYNC_ASSIGN_OR_RETURN(c.n_embd, o.flags.Int("n-embd"));
  PSYNC_ASSIGN_OR_RETURN(c.n_kv_head, o.flags.Int("n-kv-head"));
  PSYNC_ASSIGN_OR_RETURN(c.ffn_hidden, o.flags.Int("ffn-hidden"));
  PSYNC_ASSIGN_OR_RETURN(c.rope_theta, o.flags.Double("rope-theta"));
  // Token data gives sequences of --block-size ids; rows and images do not.
  if (o.input_shape != psync::Shape{o.block_size}) {
    return absl::InvalidArgumentError("--model=llama trains on token data (--data-format=tokens or bytes)");
  }
  if (c.ffn_hidden < 0) {
    return absl::InvalidArgumentError("--ffn-hidden=" + Str(c.ffn_hidden) +
                                      ": must be 0 (the default width) or positive");
  }
  if (o.vocab_size > 0 && o.vocab_size < o.num_classes) {
    return absl::InvalidArgumentError("--vocab-size=" + Str(o.vocab_size) +
                                      " is too small for --data: it holds token ids up to " + Str(o.num_classes - 1));
  }
  if (c.ffn_hidden == 0) c.ffn_hidden = DefaultFfnHidden(c.n_embd);
  PSYNC_RETURN_IF_ERROR(ValidateConfig(c));
  return std::unique_ptr<psync::nn::Model>(std::make_unique<Llama>(c, o.device, o.seed));
}

}  // namespace

int64_t DefaultFfnHidden(int64_t n_embd) {
  const int64_t h = 2 * (4 * n_embd) / 3;
  return (h + 31) / 32 * 32;
}

absl::Status ValidateConfig(const LlamaConfig& c) {
  const std::pair<int64_t, const char*> positive[] = {{c.vocab_size, "--vocab-size"}, {c.block_size, "--block-size"},
                                                      {c.n_layer, "--n-layer"},       {c.n_head, "--n-head"},
                                                      {c.n_kv_head, "--n-kv-head"},   {c.n_embd, "--n-embd"},
                                                      {c.ffn_hidden, "--ffn-hidden"}};
  for (const auto& [v, flag] : positive) {
    if (v <= 0) return absl::InvalidArgumentError(std::string(flag) + "=" + Str(v) + ": must be positive");
  }
  if (c.n_embd % c.n_head != 0) {
    return absl::InvalidArgumentError("--n-embd=" + Str(c.n_embd) + " must be divisible by --n-head=" + Str(c.n_head) +
                                      " (head size C/H)");
  }
  if (c.n_head % c.n_kv_head != 0) {
    return absl::InvalidArgumentError("--n-kv-head=" + Str(c.n_kv_head) + " must divide --n-head=" + Str(c.n_head) +
                                      " (each key/value head serves H/KV query heads)");
  }
  if (c.head_dim() % 2 != 0) {
    return absl::InvalidArgumentError("--n-embd / --n-head = " + Str(c.head_dim()) +
                                      " must be even: RoPE rotates pairs of a head's dims");
  }
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    return absl::InvalidArgumentError(absl::StrCat("--rope-theta=", c.rope_theta, ": must be positive"));
  }
  return absl::OkStatus();
}

std::vector<ParamSpec> ParameterSpecs(const LlamaConfig& c) {
  const int64_t V = c.vocab_size, C = c.n_embd, F = c.ffn_hidden, KV = c.n_kv_head * c.head_dim();
  std::vector<ParamSpec> out = {{"embed_tokens.weight", {V, C}, ParamSpec::kNormal}};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "layers." + Str(l) + ".";
    out.push_back({p + "input_layernorm.weight", {C}, ParamSpec::kOnes});
    out.push_back({p + "self_attn.q_proj.weight", {C, C}, ParamSpec::kNormal});
    out.push_back({p + "self_attn.k_proj.weight", {KV, C}, ParamSpec::kNormal});
    out.push_back({p + "self_attn.v_proj.weight", {KV, C}, ParamSpec::kNormal});
    out.push_back({p + "self_attn.o_proj.weight", {C, C}, ParamSpec::kNormalResidual});
    out.push_back({p + "post_attention_layernorm.weight", {C}, ParamSpec::kOnes});
    out.push_back({p + "mlp.gate_proj.weight", {F, C}, ParamSpec::kNormal});
    out.push_back({p + "mlp.up_proj.weight", {F, C}, ParamSpec::kNormal});
    out.push_back({p + "mlp.down_proj.weight", {C, F}, ParamSpec::kNormalResidual});
  }
  out.push_back({"norm.weight", {C}, ParamSpec::kOnes});
  out.push_back({"lm_head.weight", {V, C}, ParamSpec::kNormal});
  return out;
}

Variable LlamaForward(const LlamaConfig& c, const std::vector<Variable>& params, const Tensor& ids,
                      const std::set<int>& skip) {
  const Variable none;                         // no bias
  Variable x = ag::Embedding(ids, params[0]);  // [B, T, C]
  for (int64_t l = 0; l < c.n_layer; ++l) {
    if (skip.count(static_cast<int>(l))) continue;
    const Variable* p = &params[static_cast<size_t>(1 + l * kParamsPerLayer)];
    x = ag::Add(x, Attention(c, RmsNorm(x, p[0], c.eps), p + 1));
    const Variable h = RmsNorm(x, p[5], c.eps);
    const Variable m = ag::Mul(Silu(ag::Linear(h, p[6], none)), ag::Linear(h, p[7], none));  // SwiGLU
    x = ag::Add(x, ag::Linear(m, p[8], none));
  }
  const size_t tail = static_cast<size_t>(1 + c.n_layer * kParamsPerLayer);
  return ag::Linear(RmsNorm(x, params[tail], c.eps), params[tail + 1], none);  // [B, T, V]
}

psync::nn::ModelRegistration LlamaRegistration() {
  psync::nn::ModelRegistration m;
  m.name = "llama";
  m.help =
      "Llama-style decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU (its flags below)";
  // --n-layer, --n-head and --n-embd are also gpt's names: each model
  // declares its own (the chosen --model's are read).
  m.flags = {{"n-layer", "4", "decoder layers L"},
             {"n-head", "4", "query heads H"},
             {"n-embd", "128", "embedding width C (divisible by --n-head; head size even, for RoPE)"},
             {"n-kv-head", "2", "key/value heads of the grouped-query attention (divides --n-head)"},
             {"ffn-hidden", "0", "SwiGLU hidden width (0: 2/3 of 4*n_embd rounded up to a multiple of 32)"},
             {"rope-theta", "10000", "base of the rotary position embedding's frequencies"}};
  m.factory = MakeLlama;
  return m;
}

}  // namespace llama
