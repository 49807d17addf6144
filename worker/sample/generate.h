// Autoregressive sampling from a trained language model (psync-sample): the
// model sees the last block_size tokens, the next token is drawn from the
// softmax of the last position's logits / temperature, restricted to the
// top_k most likely (0 = all). Seeded: the same inputs give the same text.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "psync/nn/models/model.h"

namespace psync::sample {

struct SampleOptions {
  int64_t tokens = 200;       // how many to generate
  double temperature = 1.0;   // > 0; below 1 sharpens, above 1 flattens
  int64_t top_k = 0;          // 0 = the whole vocabulary
  uint64_t seed = 0;
  int64_t block_size = 0;     // the model's context length (T)
  int64_t vocab_limit = 0;    // draw only ids below this (a tokenizer smaller than the model's V); 0 = all
};

// Returns only the generated tokens. `prompt` must not be empty (the model
// needs a first position); every id must be < the model's vocabulary.
absl::StatusOr<std::vector<int64_t>> Generate(nn::Model& model, Device device, const std::vector<int64_t>& prompt,
                                              const SampleOptions& options);

// The next token from one row of logits (exposed for tests).
int64_t DrawToken(const std::vector<float>& logits, double temperature, int64_t top_k, uint64_t* rng_state);

}  // namespace psync::sample
