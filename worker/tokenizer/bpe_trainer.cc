#include "worker/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <queue>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/tokenizer/pretokenizer.h"

namespace psync::tokenizer {
namespace {

using Pair = std::pair<int32_t, int32_t>;

struct Word {
  std::vector<int32_t> ids;
  int64_t count;
};

// Pair counts over all words, which words hold each pair, and a max-heap of
// (count, pair) with stale entries: an entry whose count is not the pair's
// current count is re-pushed with the current one when popped. Every
// increase pushes a fresh entry, so the top entry with a current count is
// the true maximum (ties: the smaller pair).
class PairTable {
 public:
  void Add(const Word& w, int32_t index, int64_t sign) {
    for (size_t i = 0; i + 1 < w.ids.size(); ++i) {
      const Pair p{w.ids[i], w.ids[i + 1]};
      int64_t& c = counts_[p];
      c += sign * w.count;
      if (sign > 0) {
        changed_.push_back(p);
        where_[p].push_back(index);
      }
    }
  }
  // Pushes the pairs whose counts rose since the last call.
  void Publish() {
    std::sort(changed_.begin(), changed_.end());
    changed_.erase(std::unique(changed_.begin(), changed_.end()), changed_.end());
    for (const Pair& p : changed_) heap_.push({counts_[p], Neg(p)});
    changed_.clear();
  }
  // The most frequent pair and its count; count 0 when there is none.
  std::pair<Pair, int64_t> Best() {
    while (!heap_.empty()) {
      const auto [count, neg] = heap_.top();
      heap_.pop();
      const Pair p{-neg.first, -neg.second};
      const int64_t now = counts_[p];
      if (now == count && now > 0) return {p, now};
      if (now > 0) heap_.push({now, neg});
    }
    return {{0, 0}, 0};
  }
  // The words that held `p` (some may not any more), each once; forgets them.
  std::vector<int32_t> TakeWords(const Pair& p) {
    std::vector<int32_t> w = std::move(where_[p]);
    where_.erase(p);
    std::sort(w.begin(), w.end());
    w.erase(std::unique(w.begin(), w.end()), w.end());
    return w;
  }

 private:
  // Negated so that, among equal counts, the max-heap yields the smaller pair.
  static Pair Neg(const Pair& p) { return {-p.first, -p.second}; }
  absl::flat_hash_map<Pair, int64_t> counts_;
  absl::flat_hash_map<Pair, std::vector<int32_t>> where_;
  std::vector<Pair> changed_;
  std::priority_queue<std::pair<int64_t, Pair>> heap_;
};

// Replaces every (left, right) in `ids`, left to right, by `merged`.
void MergeInWord(std::vector<int32_t>* ids, const Pair& p, int32_t merged) {
  size_t out = 0;
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i + 1 < ids->size() && (*ids)[i] == p.first && (*ids)[i + 1] == p.second) {
      (*ids)[out++] = merged;
      ++i;
    } else {
      (*ids)[out++] = (*ids)[i];
    }
  }
  ids->resize(out);
}

}  // namespace

void BpeTrainer::AddText(absl::string_view text) {
  total_bytes_ += static_cast<int64_t>(text.size());
  ForEachPiece(text, [&](absl::string_view piece) { ++counts_[piece]; });
}

absl::StatusOr<BpeTokenizer> BpeTrainer::Train(const TrainOptions& o) const {
  if (o.vocab_size < 256 || o.vocab_size > kMaxVocabSize) {
    return absl::InvalidArgumentError(absl::StrCat("--vocab-size=", o.vocab_size, ": expected 256 (the bytes) to ",
                                                   kMaxVocabSize, " (token files hold uint16 ids)"));
  }
  if (counts_.empty()) return absl::InvalidArgumentError("the corpus is empty: nothing to train on");
  // Words in byte order, so indices (and so everything after) do not depend
  // on the hash map's order.
  std::vector<std::pair<absl::string_view, int64_t>> sorted(counts_.begin(), counts_.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  PairTable pairs;
  for (const auto& [piece, count] : sorted) {
    Word w{std::vector<int32_t>(piece.begin(), piece.end()), count};
    for (int32_t& id : w.ids) id = static_cast<uint8_t>(id);
    words.push_back(std::move(w));
    pairs.Add(words.back(), static_cast<int32_t>(words.size() - 1), +1);
  }
  pairs.Publish();

  std::vector<std::string> vocab(256);
  for (int b = 0; b < 256; ++b) vocab[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  std::vector<MergeRule> merges;
  while (static_cast<int64_t>(vocab.size()) < o.vocab_size) {
    const auto [best, count] = pairs.Best();
    if (count < std::max<int64_t>(1, o.min_frequency)) break;
    const auto merged = static_cast<int32_t>(vocab.size());
    vocab.push_back(vocab[static_cast<size_t>(best.first)] + vocab[static_cast<size_t>(best.second)]);
    merges.push_back({best.first, best.second, merged});
    for (int32_t index : pairs.TakeWords(best)) {
      Word& w = words[static_cast<size_t>(index)];
      pairs.Add(w, index, -1);
      MergeInWord(&w.ids, best, merged);
      pairs.Add(w, index, +1);
    }
    pairs.Publish();
  }
  return BpeTokenizer::Create(std::move(vocab), std::move(merges), "trained tokenizer");
}

}  // namespace psync::tokenizer
