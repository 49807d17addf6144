// A byte-level BPE tokenizer (GPT-2's scheme): text is cut into pieces by
// GPT-2's pre-tokenization (pretokenizer.h); each piece starts as its bytes'
// tokens and merges are applied by rank, the lowest-ranked adjacent pair
// first (leftmost first among equals), until none applies. Any byte string
// encodes, and decoding gives it back exactly.
//
// The vocabulary: token id -> its bytes. Every byte must have a one-byte
// token (the first one with those bytes, when several do). A merge rule
// (left, right) -> result says that result's bytes are left's then right's;
// its rank is its index in merges() (a later duplicate of a pair wins, as in
// GPT-2's encoder.py). Files: gpt2_files.h (vocab.json + merges.txt),
// training: bpe_trainer.h.
//
// Threads: const methods are safe from any thread; Encode is not (it fills
// a cache of encoded pieces): one tokenizer per encoding thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace psync::tokenizer {

struct MergeRule {
  int32_t left = 0, right = 0, result = 0;
};

class BpeTokenizer {
 public:
  // InvalidArgument (naming the id or the rule, prefixed by `source`) when an
  // id is out of range, a byte has no one-byte token, or a result's bytes are
  // not left's then right's.
  static absl::StatusOr<BpeTokenizer> Create(std::vector<std::string> vocab, std::vector<MergeRule> merges,
                                             const std::string& source);

  int64_t vocab_size() const { return static_cast<int64_t>(vocab_.size()); }
  const std::string& token_bytes(int32_t id) const { return vocab_[static_cast<size_t>(id)]; }
  const std::vector<std::string>& vocab() const { return vocab_; }
  const std::vector<MergeRule>& merges() const { return merges_; }
  int32_t byte_token(uint8_t byte) const { return byte_token_[byte]; }

  // Appends the tokens of `text` to *out.
  void Encode(absl::string_view text, std::vector<int32_t>* out);
  std::vector<int32_t> Encode(absl::string_view text);
  // The tokens of one pre-tokenized piece (no cache): the BPE merge loop.
  void EncodePiece(absl::string_view piece, std::vector<int32_t>* out) const;

  // The bytes of `ids`; InvalidArgument naming the first id outside the vocabulary.
  absl::StatusOr<std::string> Decode(absl::Span<const int64_t> ids) const;

 private:
  BpeTokenizer() = default;
  static uint64_t PairKey(int32_t a, int32_t b) { return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b); }
  struct Rank {
    int32_t rank, result;
  };

  std::vector<std::string> vocab_;
  std::vector<MergeRule> merges_;
  int32_t byte_token_[256] = {};
  absl::flat_hash_map<uint64_t, Rank> ranks_;  // (left, right) -> rank and result
  // Encode's cache (piece -> tokens), cleared when it grows past a bound so
  // memory stays flat on any corpus. Touched only by Encode.
  absl::flat_hash_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace psync::tokenizer
