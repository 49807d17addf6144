// Hugging Face's GPT-2 checkpoint layout (transformers' GPT2LMHeadModel /
// GPT2Model saved as safetensors) <-> psync's GPT parameters
// (docs/cli-contract.md "GPT model contract"). The two differ only in:
//
//   * names: HF's may carry a "transformer." prefix (save_pretrained of
//     GPT2LMHeadModel; the hub's gpt2 files have none);
//   * layout: HF's Conv1D stores attn.c_attn, attn.c_proj, mlp.c_fc and
//     mlp.c_proj weights as [in, out]; psync's Linear as [out, in];
//   * buffers: h.i.attn.bias (the causal mask) and h.i.attn.masked_bias are
//     not parameters and are dropped;
//   * the head: lm_head.weight, when present, must equal wte.weight (psync's
//     head is tied to wte) and is dropped.
//
// The numbers are the same function: HF's GPT-2 uses GELU-tanh ("gelu_new"),
// LayerNorm eps 1e-5 and 1/sqrt(head size) attention scaling, as psync does.
// A config.json beside the file (HF's directory layout) gives n_head and is
// checked for settings psync does not implement.
//
// Threads: stateless functions.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "worker/checkpoint/model_config.h"
#include "psync/nn/models/model.h"
#include "psync/tensor/named_tensors.h"

namespace psync::checkpoint {

inline constexpr char kHfPrefix[] = "transformer.";

// Whether `tensors` are in HF's layout: a "transformer." name, an attn.bias /
// attn.masked_bias buffer, lm_head.weight, or h.0.attn.c_attn.weight stored
// [C, 3C] (psync's is [3C, C]).
bool LooksLikeHfGpt2(const NamedTensors& tensors);

// HF tensors -> psync's names, layout and order (float32; F16/BF16 are
// widened). The model record comes from the shapes (vocab_size, block_size,
// the GPT's flags n-layer and n-embd) and n-head from `metadata`'s record
// (psync-export writes it) or `path`'s config.json; n-head is left out when
// neither has it.
// InvalidArgument naming `path` and the tensor for anything else.
absl::StatusOr<NamedTensors> FromHfGpt2(NamedTensors tensors, const std::map<std::string, std::string>& metadata,
                                        const std::string& path, ModelRecord* model);

// psync GPT parameters (psync names and layout) -> HF's save_pretrained
// layout: "transformer." names, Conv1D weights [in, out], no buffers, no
// lm_head (tied). InvalidArgument when a GPT parameter is missing.
absl::StatusOr<NamedTensors> ToHfGpt2(const NamedTensors& params);

// config.json for GPT2LMHeadModel.from_pretrained with these dimensions
// (the GPT's flags n-layer, n-head, n-embd; InvalidArgument when one is
// missing or not an integer).
absl::StatusOr<std::string> HfGpt2Config(const nn::ModelOptions& options);

}  // namespace psync::checkpoint
