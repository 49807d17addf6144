// libFuzzer target for the tokenizer's file parsers (worker/tokenizer:
// vocab.json through the guarded SAX reader, merges.txt line by line, the
// reachability check). An input is vocab.json's bytes, a 0xFF byte (never
// in UTF-8 text), then merges.txt's bytes; when it starts with '+', the '+'
// stands for "{" and the 256 byte tokens and a comma, so mutations get past
// "every byte has a token" and reach the merges. Any input must give either
// a tokenizer that round-trips (its files parse back to the same vocabulary
// and merges; encoding then decoding bytes gives them back) or one short
// error line naming a source, never a crash, leak or UB.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/json.h"
#include "worker/tokenizer/gpt2_files.h"

namespace {

namespace tk = psync::tokenizer;

constexpr char kVocabSource[] = "fuzz/vocab.json";
constexpr char kMergesSource[] = "fuzz/merges.txt";
// Messages quote excerpts of at most about 80 characters, two at most.
constexpr size_t kMaxMessageChars = 400;

const std::string& BytePrefix() {
  static const std::string prefix = [] {
    std::string v = "{";
    for (int b = 0; b < 256; ++b) {
      v += psync::json::Quote(tk::BytesToGpt2Text(std::string(1, static_cast<char>(b)))) + ":" + std::to_string(b) + ",";
    }
    return v;
  }();
  return prefix;
}

bool SameTokenizer(const tk::BpeTokenizer& a, const tk::BpeTokenizer& b) {
  if (a.vocab() != b.vocab() || a.merges().size() != b.merges().size()) return false;
  for (size_t i = 0; i < a.merges().size(); ++i) {
    const tk::MergeRule &x = a.merges()[i], &y = b.merges()[i];
    if (x.left != y.left || x.right != y.right || x.result != y.result) return false;
  }
  return true;
}

void CheckAccepted(tk::BpeTokenizer& t, const std::string& text) {
  absl::StatusOr<tk::Gpt2FilesText> files = tk::FormatGpt2Files(t);
  if (!files.ok()) {
    // Two tokens with the same bytes (e.g. an added "中" and GPT-2's spelling of its bytes) cannot both be written.
    if (files.status().message().find("has the same bytes as token") == absl::string_view::npos) std::abort();
  } else {
    absl::StatusOr<tk::BpeTokenizer> back = tk::ParseGpt2Files(files->vocab_json, files->merges_txt, "again/vocab.json",
                                                               "again/merges.txt");
    if (!back.ok() || !SameTokenizer(t, *back)) std::abort();
  }
  std::vector<int32_t> ids = t.Encode(text);
  std::vector<int64_t> wide(ids.begin(), ids.end());
  absl::StatusOr<std::string> decoded = t.Decode(wide);
  if (!decoded.ok() || *decoded != text) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t cut = input.find('\xff');
  std::string vocab = input.substr(0, cut);
  const std::string merges = cut == std::string::npos ? "" : input.substr(cut + 1);
  if (!vocab.empty() && vocab[0] == '+') vocab = BytePrefix() + vocab.substr(1);
  absl::StatusOr<tk::BpeTokenizer> t = tk::ParseGpt2Files(vocab, merges, kVocabSource, kMergesSource);
  if (t.ok()) {
    CheckAccepted(*t, input.substr(0, 256));
    return 0;
  }
  const std::string message(t.status().message());
  const bool named = message.rfind(kVocabSource, 0) == 0 || message.rfind(kMergesSource, 0) == 0;
  if (!named || message.size() > kMaxMessageChars || message.find('\n') != std::string::npos) std::abort();
  return 0;
}
