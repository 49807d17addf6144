// Training a byte-level BPE (psync-tokenize train): the corpus is cut into
// pieces by GPT-2's pre-tokenization (so merges never cross a piece, as in
// GPT-2), the vocabulary starts as the 256 bytes (token id b = byte b), and
// each round merges the most frequent adjacent pair of tokens, counted over
// all pieces; ties go to the pair with the smaller (left, right) ids. The
// merged token gets the next id. Training stops at `vocab_size` tokens, or
// earlier when no pair occurs `min_frequency` times.
//
// Deterministic: the result depends only on the corpus text and the options
// (not on hash order, threads or the order pieces were counted in).
//
// Threads: a BpeTrainer is used by one thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/tokenizer/bpe_tokenizer.h"

namespace psync::tokenizer {

struct TrainOptions {
  int64_t vocab_size = 512;   // 256 bytes + merges; <= 65536 (uint16 token files)
  int64_t min_frequency = 2;  // a pair seen fewer times is not merged
};

inline constexpr int64_t kMaxVocabSize = 65536;

class BpeTrainer {
 public:
  // Counts the pieces of `text` (call once per document or file).
  void AddText(absl::string_view text);
  // InvalidArgument when vocab_size is outside [256, 65536] or nothing was added.
  absl::StatusOr<BpeTokenizer> Train(const TrainOptions& options) const;

  int64_t total_bytes() const { return total_bytes_; }
  int64_t distinct_pieces() const { return static_cast<int64_t>(counts_.size()); }

 private:
  absl::flat_hash_map<std::string, int64_t> counts_;  // piece -> occurrences
  int64_t total_bytes_ = 0;
};

}  // namespace psync::tokenizer
