#include "worker/nn/models/gpt.h"

#include <cmath>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/nn_functions.h"
#include "psync/autograd/view_functions.h"
#include "psync/nn/init.h"
#include "psync/nn/precision.h"
#include "psync/tensor/ops.h"

namespace psync::nn {

namespace {

constexpr float kInitStd = 0.02f;
// The head's rows: V padded to a multiple of this (llm.c pads 50257 to 50304).
constexpr int64_t kVocabPad = 128;

// Seeds of the model's tensors: one stream per tensor, in registration order.
class Init {
 public:
  Init(uint64_t seed, Device device) : seed_(seed), device_(device) {}
  Tensor Normal(const Shape& shape, float std) {
    SplitMix64 rng(DeriveSeed(seed_, next_++));
    return Tensor::FromVector(NormalValues(rng, NumelOf(shape), 0.0f, std), shape, device_);
  }
  Tensor Zeros(const Shape& shape) { return Tensor::Zeros(shape, device_); }

 private:
  uint64_t seed_;
  Device device_;
  uint64_t next_ = 0;
};

}  // namespace

// One transformer block: pre-LayerNorm attention and MLP, each with a
// residual. The model runs it fused with its neighbours (GPT::Forward): the
// block gets x and y = ln_1(x) and returns h = x + attn(y) and the MLP's
// output m; the residual add h + m is fused with the next LayerNorm.
class GPT::Block : public Module {
 public:
  Block(const GptConfig& c, Init& init, Device device) : C_(c.n_embd), H_(c.n_head), attention_(c.attention) {
    const float proj_std = kInitStd / std::sqrt(2.0f * static_cast<float>(c.n_layer));
    ln_1_ = RegisterModule("ln_1", std::make_shared<LayerNorm>(C_, device));
    c_attn_ = RegisterModule("attn.c_attn", std::make_shared<Linear>(init.Normal({3 * C_, C_}, kInitStd), init.Zeros({3 * C_})));
    attn_proj_ = RegisterModule("attn.c_proj", std::make_shared<Linear>(init.Normal({C_, C_}, proj_std), init.Zeros({C_})));
    ln_2_ = RegisterModule("ln_2", std::make_shared<LayerNorm>(C_, device));
    c_fc_ = RegisterModule("mlp.c_fc", std::make_shared<Linear>(init.Normal({4 * C_, C_}, kInitStd), init.Zeros({4 * C_})));
    mlp_proj_ = RegisterModule("mlp.c_proj", std::make_shared<Linear>(init.Normal({C_, 4 * C_}, proj_std), init.Zeros({C_})));
  }

  // x [B, T, C] -> [B, T, C], unfused (the model calls Run instead).
  Variable Forward(const Variable& x) override {
    auto [h, m] = Run(x, (*ln_1_)(x));
    return autograd::Add(h, m);
  }

  // x the residual stream, y = ln_1(x): {h = x + attn(y), m = mlp(ln_2(h))}.
  std::pair<Variable, Variable> Run(const Variable& x, const Variable& y) {
    auto [h, y2] = ln_2_->ForwardResidual(x, Attention(y));
    // The fused MLP reads c_fc and c_proj without their Forward: a forward
    // scope on each (ZeRO-3 gathers just those two layers for it).
    ForwardScope fc(*c_fc_), proj(*mlp_proj_);
    const PrecisionPolicy& p = precision();
    const autograd::MlpParams mlp{c_fc_->weight(), c_fc_->bias(), mlp_proj_->weight(), mlp_proj_->bias(),
                                  p.MatmulWeight(c_fc_->weight()), p.MatmulWeight(mlp_proj_->weight())};
    Variable m = autograd::Mlp(y2, mlp);
    proj.Done({m});
    fc.Done({m});
    return {h, m};
  }

  LayerNorm& ln_1() { return *ln_1_; }

  void AppendMatmulWeights(std::vector<std::pair<std::string, Variable>>* out) const {
    for (const Linear* l : {c_attn_.get(), attn_proj_.get(), c_fc_.get(), mlp_proj_.get()}) {
      out->emplace_back(l->weight().name(), l->weight());
    }
  }

 private:
  // x [B, T, C] -> causal self-attention [B, T, C]. Every reshape here is a
  // view of the qkv projection; the fused path also returns its heads in
  // [B, T, H, hs] memory, so nothing is copied until c_proj (the
  // materialized path copies when the heads are joined back).
  Variable Attention(const Variable& x) {
    const int64_t B = x.data().size(0), T = x.data().size(1), hs = C_ / H_;
    std::vector<Variable> qkv = autograd::Split((*c_attn_)(x), {C_, C_, C_}, 2);  // 3 x [B, T, C]
    auto heads = [&](const Variable& t) {                                              // [B, H, T, hs]
      return autograd::Permute(autograd::Reshape(t, {B, T, H_, hs}), {0, 2, 1, 3});
    };
    Variable q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
    Variable y;                                                                          // [B, H, T, hs]
    if (attention_ == GptAttention::kFused) {
      y = autograd::CausalAttention(q, k, v, scale);
    } else {
      Variable scores = autograd::BatchedMatmul(q, autograd::Transpose(k, -2, -1));      // [B, H, T, T]
      y = autograd::BatchedMatmul(autograd::CausalSoftmax(scores, scale), v);
    }
    y = autograd::Reshape(autograd::Permute(y, {0, 2, 1, 3}), {B, T, C_});               // [B, T, C]
    return (*attn_proj_)(y);
  }

  int64_t C_, H_;
  GptAttention attention_;
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<Linear> c_attn_, attn_proj_, c_fc_, mlp_proj_;
};

absl::StatusOr<GptAttention> ParseGptAttention(absl::string_view name) {
  if (name == "fused") return GptAttention::kFused;
  if (name == "materialized") return GptAttention::kMaterialized;
  return absl::InvalidArgumentError(
      absl::StrCat("--attention=", name, ": must be fused (flash-style, O(T) memory) or materialized ([B, H, T, T] scores)"));
}

const char* GptAttentionName(GptAttention a) { return a == GptAttention::kFused ? "fused" : "materialized"; }

absl::Status ValidateGptConfig(const GptConfig& c) {
  auto positive = [](int64_t v, const char* flag) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(flag, "=", v, ": must be positive"));
  };
  for (absl::Status st : {positive(c.vocab_size, "--vocab-size"), positive(c.block_size, "--block-size"),
                          positive(c.n_layer, "--n-layer"), positive(c.n_head, "--n-head"),
                          positive(c.n_embd, "--n-embd")}) {
    if (!st.ok()) return st;
  }
  if (c.n_embd % c.n_head != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--n-embd=", c.n_embd, " must be divisible by --n-head=", c.n_head, " (head size C/H)"));
  }
  return absl::OkStatus();
}

GPT::GPT(const GptConfig& config, Device device, uint64_t seed) : config_(config), device_(device) {
  Init init(seed, device);
  const int64_t V = config.vocab_size, T = config.block_size, C = config.n_embd;
  // wte is the first V rows of a zero-padded [Vp, C] tensor (a contiguous
  // view: files, --init, checkpoints and the optimizer see [V, C]); the
  // head multiplies with all Vp rows, so its logits rows are Vp long and
  // aligned, and the model returns the [.., V] view of them.
  const int64_t Vp = (V + kVocabPad - 1) / kVocabPad * kVocabPad;
  wte_padded_ = Tensor::Zeros({Vp, C}, device);
  Tensor wte = wte_padded_.Narrow(0, 0, V);
  ops::Copy(wte, init.Normal({V, C}, kInitStd));
  wte_ = RegisterModule("wte", std::make_shared<Embedding>(wte));
  wpe_ = RegisterModule("wpe", std::make_shared<Embedding>(init.Normal({T, C}, kInitStd)));
  for (int64_t i = 0; i < config.n_layer; ++i) {
    blocks_.push_back(RegisterModule(absl::StrCat("h.", i), std::make_shared<Block>(config, init, device)));
  }
  ln_f_ = RegisterModule("ln_f", std::make_shared<LayerNorm>(C, device));
}

absl::Status GPT::ValidateSkip(const std::set<int>& skip_blocks) const {
  for (int j : skip_blocks) {
    if (j < 0 || j >= config_.n_layer) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpt: cannot skip block ", j, ": the model has blocks 0..", config_.n_layer - 1));
    }
  }
  return absl::OkStatus();
}

Variable GPT::Forward(const Variable& idx, const std::set<int>& skip_blocks) {
  const Tensor& ids = idx.data();
  if (ids.dim() != 2 || ids.dtype() != kInt64) {
    throw TensorError(absl::StrCat("gpt: expects token ids [B, T] int64, got ", ids.DebugString()));
  }
  const int64_t B = ids.size(0), T = ids.size(1);
  if (T > config_.block_size) {
    throw TensorError(absl::StrCat("gpt: sequence length ", T, " exceeds --block-size=", config_.block_size));
  }
  if (!skip_blocks.empty()) {
    absl::Status st = ValidateSkip(skip_blocks);
    if (!st.ok()) throw TensorError(std::string(st.message()));
  }
  Variable x = autograd::Add((*wte_)(idx), (*wpe_)(Variable(Positions(B, T, ids.device()))));  // [B, T, C]
  std::vector<Block*> active;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (!skip_blocks.count(static_cast<int>(i))) active.push_back(blocks_[i].get());
  }
  // Each block's closing residual add is fused with the LayerNorm after it
  // (the next block's ln_1, or ln_f): the same values as add then norm.
  Variable y = active.empty() ? (*ln_f_)(x) : active.front()->ln_1()(x);
  for (size_t k = 0; k < active.size(); ++k) {
    auto [h, m] = active[k]->Run(x, y);
    LayerNorm& next = k + 1 < active.size() ? active[k + 1]->ln_1() : *ln_f_;
    std::tie(x, y) = next.ForwardResidual(h, m);
  }
  // The head is wte itself: logits = ln_f(x) @ wte^T, [B, T, V]. In float32
  // computed over the padded rows (the padded logits, all 0, never leave:
  // a [B, T, V] view of rows Vp long); in a bf16 step from wte's bfloat16
  // copy ([V, C], unpadded): bfloat16 logits, read by the float32 loss.
  // A forward scope of its own: the tied head reads wte outside the embedding's Forward.
  ForwardScope head(*wte_);
  const Tensor& w = precision().MatmulWeight(wte_->weight());
  if (w.dtype() == kBFloat16) return head.Done({autograd::Linear(y, wte_->weight(), Variable(), w)});
  // Why a copy can be needed: --zero moves every parameter's values into its
  // flat buffers, so wte may no longer be the view of the padded rows it was
  // built as ([V, C], once per step: small beside the head's product).
  Tensor rows = wte_padded_.Narrow(0, 0, config_.vocab_size);
  if (!w.IsSameView(rows)) ops::Copy(rows, w);
  return head.Done({autograd::LinearPadded(y, wte_->weight(), wte_padded_)});
}

const Tensor& GPT::Positions(int64_t B, int64_t T, Device device) {
  // Positions 0..T-1 for every row: wpe's gradient then sums over the batch
  // in the embedding's deterministic scatter-add. Made once per shape and
  // device (no host-to-device copy per step).
  if (!positions_.defined() || positions_.size(0) != B || positions_.size(1) != T || positions_.device() != device) {
    std::vector<int64_t> pos(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b) std::iota(pos.begin() + b * T, pos.begin() + (b + 1) * T, int64_t{0});
    positions_ = Tensor::FromVector(pos, {B, T}, device);
  }
  return positions_;
}

std::vector<std::pair<std::string, Variable>> GPT::MatmulWeights() const {
  std::vector<std::pair<std::string, Variable>> out = {{wte_->weight().name(), wte_->weight()}};
  for (const auto& b : blocks_) b->AppendMatmulWeights(&out);
  return out;
}

std::string GPT::Describe() const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.data().numel();
  return absl::StrCat("gpt (L=", config_.n_layer, ", H=", config_.n_head, ", C=", config_.n_embd, ", V=",
                      config_.vocab_size, ", T=", config_.block_size, "): ", n, " parameters");
}

}  // namespace psync::nn
