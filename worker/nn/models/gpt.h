// GPT: a GPT-2-style decoder-only transformer (llm.c's model).
//
//   x = wte[idx] + wpe[0..T-1]                          idx [B, T] int64 -> x [B, T, C]
//   per block i (h.i):
//     x = x + attn(ln_1(x))                             causal self-attention, H heads of C/H
//     x = x + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x))))  C -> 4C -> C
//   logits = ln_f(x) @ wte^T                            [B, T, V]; the head is wte (tied),
//                                                       multiplied as V padded to a multiple of 128
//
// attn: q, k, v = split(c_attn(x), C) as [B, H, T, C/H] heads, scores
// q k^T / sqrt(C/H) with the future masked, softmax, times v, heads joined
// back to [B, T, C], then c_proj. LayerNorm eps 1e-5, no dropout. The
// attention runs fused by default (autograd::CausalAttention: flash-style,
// O(T) memory, on the head views of c_attn's output without a copy); the
// materialized path (scores [B, H, T, T], CausalSoftmax, two batched
// matmuls) stays selectable as the reference.
//
// Computed with fused ops that give the same values: each residual add with
// the LayerNorm after it (autograd::ResidualLayerNorm), the MLP as one node
// (autograd::Mlp: bias+GELU and GELU-backward as matmul epilogues), bias
// adds as matmul epilogues. In a bf16 step (nn/precision.h) the matmuls and
// the activations between them are bfloat16, the residual stream, the
// LayerNorms' and softmax's math, the loss and every parameter and
// gradient float32.
//
// Parameters, in registration order, with PyTorch's Linear layout [out, in]:
// wte.weight [V,C], wpe.weight [T,C], then per block h.i: ln_1.{weight,bias}
// [C], attn.c_attn.weight [3C,C], attn.c_attn.bias [3C], attn.c_proj.weight
// [C,C], attn.c_proj.bias [C], ln_2.{weight,bias} [C], mlp.c_fc.weight [4C,C],
// mlp.c_fc.bias [4C], mlp.c_proj.weight [C,4C], mlp.c_proj.bias [C]; then
// ln_f.{weight,bias} [C]. wte receives two gradients per backward (lookup
// and head).
//
// Initialisation (seeded, drawn on the host): every weight N(0, 0.02), the
// two c_proj weights of a block N(0, 0.02/sqrt(2L)), biases 0, LayerNorm
// weights 1.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "psync/nn/embedding.h"
#include "psync/nn/layer_norm.h"
#include "psync/nn/layers.h"
#include "psync/nn/models/model.h"

namespace psync::nn {

// How a block computes causal self-attention (--attention).
enum class GptAttention { kFused, kMaterialized };
// "fused" | "materialized"; InvalidArgument naming --attention otherwise.
absl::StatusOr<GptAttention> ParseGptAttention(absl::string_view name);
const char* GptAttentionName(GptAttention a);

struct GptConfig {
  int64_t vocab_size = 256;  // V
  int64_t block_size = 64;   // T: the longest sequence
  int64_t n_layer = 4;       // L
  int64_t n_head = 4;        // H
  int64_t n_embd = 128;      // C (divisible by H)
  GptAttention attention = GptAttention::kFused;
};

// InvalidArgument naming the flag (--n-embd ...) when the config cannot be built.
absl::Status ValidateGptConfig(const GptConfig& config);

class GPT : public Model {
 public:
  GPT(const GptConfig& config, Device device = Device::CPU(), uint64_t seed = 0);

  using Model::Forward;
  // idx [B, T] int64 token ids (T <= block_size, each < vocab_size) -> logits
  // [B, T, V]. Blocks in `skip_blocks` are bypassed (their parameters unused).
  Variable Forward(const Variable& idx, const std::set<int>& skip_blocks) override;
  absl::Status ValidateSkip(const std::set<int>& skip_blocks) const override;
  std::string Describe() const override;
  // wte (the head) and every Linear weight of every block.
  std::vector<std::pair<std::string, Variable>> MatmulWeights() const override;
  const GptConfig& config() const { return config_; }

 private:
  class Block;
  GptConfig config_;
  Device device_;
  std::shared_ptr<Embedding> wte_, wpe_;
  // [Vp, C], Vp = V rounded up to a multiple of 128: rows < V are wte's
  // weight (it is a view of them), the rest stay 0 (nothing writes them).
  Tensor wte_padded_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<LayerNorm> ln_f_;
  // [B, T] int64 positions on the device, kept for the next forward.
  const Tensor& Positions(int64_t B, int64_t T, Device device);
  Tensor positions_;
};

}  // namespace psync::nn
