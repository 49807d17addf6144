// --data-format=tokens|bytes: language modelling on a token stream
// (token_stream.h: one file, or a glob / directory of llm.c shards read as
// one stream), the contract of docs/cli-contract.md with N tokens and
// block size T (N > T):
//
//   step s, global batch B: sequence k (0..B-1) starts at
//     o = ((s*B + k) * T) mod (N - T)
//   input tok[o : o+T], target tok[o+1 : o+T+1]
//   rank r owns sequences [r*B/W, (r+1)*B/W); micro-batch m is the m-th
//   contiguous slice of them (batch_geometry.h)
//
// Batches: inputs and targets int64 [b, T]. Examples(i, c) are the windows
// starting at i*T (num_examples = (N - 1) / T). The tokens stay in the
// mapping; only the batches are copied. Positions are int64: a stream of
// shards may hold more than 2^31 tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/data_options.h"
#include "worker/data/dataset.h"
#include "worker/data/token_stream.h"

namespace psync::data {

class TokenDataset : public Dataset {
 public:
  // Tokens [begin, begin + count) of `tokens` (count > block_size >= 1).
  // max_token_id: the largest id there, or -1 when the stream checks ids
  // against `vocab_limit` itself (shards with --vocab-size: num_outputs is then
  // vocab_limit).
  TokenDataset(TokenStream tokens, int64_t begin, int64_t count, int64_t block_size, int64_t max_token_id,
               int64_t vocab_limit, std::string description);

  std::string Describe() const override;  // description + the largest token id
  const DataInfo& info() const override { return info_; }
  int64_t num_examples() const override { return (count_ - 1) / block_size_; }
  absl::StatusOr<Batch> Get(const BatchSpec& spec) const override;
  absl::StatusOr<Batch> Examples(int64_t begin, int64_t count) const override;

  int64_t num_tokens() const { return count_; }
  // Where sequence `slot` of `step` starts (the contract's o), for tests and tools.
  int64_t SequenceStart(int64_t step, int64_t global_batch, int64_t slot) const;

 private:
  // Copies the T-token windows starting at `starts` into inputs/targets.
  absl::StatusOr<Batch> Windows(const std::vector<int64_t>& starts) const;

  TokenStream tokens_;
  int64_t begin_, count_, block_size_;
  std::string description_;
  DataInfo info_;
};

// Registry factories (data/registry.cc): --data-format=tokens (llm.c) and bytes.
absl::StatusOr<std::unique_ptr<Dataset>> OpenTokens(const DataOptions& options);
absl::StatusOr<std::unique_ptr<Dataset>> OpenBytes(const DataOptions& options);

}  // namespace psync::data
