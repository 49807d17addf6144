#include "worker/tokenizer/bpe_tokenizer.h"

#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/tokenizer/pretokenizer.h"

namespace psync::tokenizer {
namespace {

// Bounds of Encode's cache: long pieces are rarely repeated, and a corpus of
// many distinct pieces would otherwise grow it without end.
constexpr size_t kMaxCachedPieceBytes = 64;
constexpr size_t kMaxCacheEntries = 1 << 20;

}  // namespace

absl::StatusOr<BpeTokenizer> BpeTokenizer::Create(std::vector<std::string> vocab, std::vector<MergeRule> merges,
                                                  const std::string& source) {
  BpeTokenizer t;
  const auto n = static_cast<int64_t>(vocab.size());
  if (n > INT32_MAX) return absl::InvalidArgumentError(absl::StrCat(source, ": ", n, " tokens is too many"));
  for (int32_t& b : t.byte_token_) b = -1;
  for (int64_t id = 0; id < n; ++id) {
    const std::string& s = vocab[static_cast<size_t>(id)];
    if (s.size() == 1 && t.byte_token_[static_cast<uint8_t>(s[0])] < 0) {
      t.byte_token_[static_cast<uint8_t>(s[0])] = static_cast<int32_t>(id);
    }
  }
  for (int b = 0; b < 256; ++b) {
    if (t.byte_token_[b] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": no token is the single byte 0x", absl::Hex(b, absl::kZeroPad2),
                                                     ", so text holding it cannot be encoded (a byte-level BPE ",
                                                     "vocabulary has a token for each of the 256 bytes)"));
    }
  }
  for (size_t i = 0; i < merges.size(); ++i) {
    const MergeRule& m = merges[i];
    for (int32_t id : {m.left, m.right, m.result}) {
      if (id < 0 || id >= n) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": merge ", i, " names token id ", id, ", outside the vocabulary of ", n));
      }
    }
    const std::string& l = vocab[static_cast<size_t>(m.left)];
    const std::string& r = vocab[static_cast<size_t>(m.right)];
    const std::string& out = vocab[static_cast<size_t>(m.result)];
    if (out.size() != l.size() + r.size() || out.compare(0, l.size(), l) != 0 || out.compare(l.size(), r.size(), r) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": merge ", i, " of tokens ", m.left, " and ", m.right,
                                                     " gives token ", m.result, ", whose bytes are not theirs joined"));
    }
    t.ranks_[PairKey(m.left, m.right)] = Rank{static_cast<int32_t>(i), m.result};
  }
  t.vocab_ = std::move(vocab);
  t.merges_ = std::move(merges);
  return t;
}

void BpeTokenizer::EncodePiece(absl::string_view piece, std::vector<int32_t>* out) const {
  // Symbols in a linked list over the piece's bytes; a min-heap of candidate
  // merges by (rank, position). An entry is stale when its left symbol was
  // merged away or its pair changed since it was pushed: the rank identifies
  // the pair, so a changed pair shows as a different rank.
  struct Symbol {
    int32_t id, prev, next;
  };
  const auto n = static_cast<int32_t>(piece.size());
  if (n == 0) return;
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) sym[i] = {byte_token_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  using Entry = std::pair<int32_t, int32_t>;  // (rank, left position)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  auto consider = [&](int32_t left) {
    if (left < 0 || sym[left].next < 0) return;
    auto it = ranks_.find(PairKey(sym[left].id, sym[sym[left].next].id));
    if (it != ranks_.end()) heap.emplace(it->second.rank, left);
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const auto [rank, left] = heap.top();
    heap.pop();
    const int32_t right = sym[left].next;
    if (sym[left].id < 0 || right < 0) continue;
    auto it = ranks_.find(PairKey(sym[left].id, sym[right].id));
    if (it == ranks_.end() || it->second.rank != rank) continue;
    sym[left].id = it->second.result;
    sym[left].next = sym[right].next;
    if (sym[right].next >= 0) sym[sym[right].next].prev = left;
    sym[right].id = -1;
    consider(sym[left].prev);
    consider(left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

void BpeTokenizer::Encode(absl::string_view text, std::vector<int32_t>* out) {
  ForEachPiece(text, [&](absl::string_view piece) {
    if (piece.size() > kMaxCachedPieceBytes) {
      EncodePiece(piece, out);
      return;
    }
    auto it = cache_.find(piece);
    if (it == cache_.end()) {
      if (cache_.size() >= kMaxCacheEntries) cache_.clear();
      std::vector<int32_t> ids;
      EncodePiece(piece, &ids);
      it = cache_.emplace(std::string(piece), std::move(ids)).first;
    }
    out->insert(out->end(), it->second.begin(), it->second.end());
  });
}

std::vector<int32_t> BpeTokenizer::Encode(absl::string_view text) {
  std::vector<int32_t> out;
  Encode(text, &out);
  return out;
}

absl::StatusOr<std::string> BpeTokenizer::Decode(absl::Span<const int64_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token ", i, " is id ", ids[i],
                                                     ", outside the tokenizer's vocabulary of ", vocab_size()));
    }
    out += vocab_[static_cast<size_t>(ids[i])];
  }
  return out;
}

}  // namespace psync::tokenizer
