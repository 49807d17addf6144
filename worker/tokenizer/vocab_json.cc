#include "worker/tokenizer/vocab_json.h"

#include <cstdio>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "worker/tokenizer/file_limits.h"
#include "worker/tokenizer/gpt2_text.h"

namespace psync::tokenizer {
namespace {

// The characters of a JSON string between its quotes, escapes included: a
// token's byte takes at most 6 ("\u0120").
constexpr size_t kMaxStringChars = 6 * kMaxTokenBytes;
// A number's characters (or a literal's: true, false, null).
constexpr size_t kMaxNumberChars = 32;

// JSON's whitespace and punctuation: what ends a number.
bool IsSeparator(char c) {
  switch (c) {
    case ' ': case '\t': case '\r': case '\n': case '{': case '}': case '[': case ']': case ':': case ',':
      return true;
    default:
      return false;
  }
}

// Hands the stream's bytes to the JSON lexer one at a time. The lexer keeps
// a whole string or number in memory, and takes a NUL byte for the end of
// input: this refuses those past the limits, and NULs, and then shows the
// lexer the end of input (the refusal is the error, not the lexer's).
class GuardedReader {
 public:
  GuardedReader(std::streambuf* in, const std::string& source) : in_(in), source_(source) { Load(); }
  int Peek() const { return current_; }
  void Advance() {
    in_->sbumpc();
    Load();
  }
  int64_t line() const { return line_; }
  const std::string& refusal() const { return refusal_; }

 private:
  void Load();
  void Count(char c, bool in_string);
  void Refuse(const std::string& why) {
    refusal_ = absl::StrCat(source_, why);
    current_ = EOF;
  }

  std::streambuf* in_;
  const std::string& source_;
  int current_ = EOF;
  int64_t bytes_ = 0, line_ = 1;
  bool in_string_ = false, escape_ = false;
  size_t run_ = 0;         // characters of the current string or number
  std::string run_start_;  // its first kExcerptBytes, for the error
  std::string refusal_;
};

void GuardedReader::Load() {
  current_ = refusal_.empty() ? in_->sgetc() : EOF;
  if (current_ == EOF) return;
  const char c = static_cast<char>(current_);
  if (++bytes_ > kMaxVocabFileBytes) {
    return Refuse(absl::StrCat(": more than ", kMaxVocabFileBytes, " bytes, the limit for a vocab.json"));
  }
  if (c == '\0') return Refuse(absl::StrCat(" line ", line_, ": a NUL byte (JSON text never holds one)"));
  if (c == '\n') ++line_;
  if (in_string_) {
    if (!escape_ && c == '"') {
      in_string_ = false;
      run_ = 0;
      run_start_.clear();
      return;
    }
    escape_ = !escape_ && c == '\\';
    return Count(c, /*in_string=*/true);
  }
  if (c == '"' || IsSeparator(c)) {
    in_string_ = c == '"';
    escape_ = false;
    run_ = 0;
    run_start_.clear();
    return;
  }
  Count(c, /*in_string=*/false);
}

void GuardedReader::Count(char c, bool in_string) {
  if (run_start_.size() < kExcerptBytes) run_start_.push_back(c);
  if (++run_ <= (in_string ? kMaxStringChars : kMaxNumberChars)) return;
  Refuse(absl::StrCat(" line ", line_, ": ",
                      in_string ? absl::StrCat("a string longer than ", kMaxStringChars, " characters (a token is at most ",
                                               kMaxTokenBytes, " bytes)")
                                : absl::StrCat("a number longer than ", kMaxNumberChars, " characters"),
                      ": ", Excerpt(run_start_, /*prefix=*/true)));
}

// GuardedReader as the input iterator nlohmann's parser reads; the end
// iterator is a null one, and any iterator is at the end once Peek is EOF.
class ReaderIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = char;

  explicit ReaderIterator(GuardedReader* r) : r_(r) {}
  char operator*() const { return static_cast<char>(r_->Peek()); }
  ReaderIterator& operator++() {
    r_->Advance();
    return *this;
  }
  bool operator==(const ReaderIterator& o) const { return AtEnd() == o.AtEnd(); }
  bool operator!=(const ReaderIterator& o) const { return !(*this == o); }

 private:
  bool AtEnd() const { return r_ == nullptr || r_->Peek() == EOF; }
  GuardedReader* r_;
};

// nlohmann's SAX events -> the vocabulary, refusing (returning false, which
// stops the parser) anything but one object of "token": id.
class VocabBuilder {
 public:
  VocabBuilder(const GuardedReader& reader, const std::string& source) : reader_(reader), source_(source) {}

  bool null() { return NotAnId("null"); }
  bool boolean(bool v) { return NotAnId(v ? "true" : "false"); }
  bool number_integer(int64_t v) { return Id(v); }
  bool number_unsigned(uint64_t v) { return Id(v > INT64_MAX ? INT64_MAX : static_cast<int64_t>(v)); }
  bool number_float(double, const std::string& text) { return NotAnId(text); }
  bool string(std::string& s) { return NotAnId(absl::StrCat("the string ", Excerpt(s))); }
  bool binary(json::Json::binary_t&) { return NotAnId("binary data"); }
  bool start_object(size_t) {
    if (state_ != State::kBefore) return NotAnId("an object");
    state_ = State::kInObject;
    return true;
  }
  bool key(std::string& key);
  bool end_object() {
    state_ = State::kDone;
    return true;
  }
  bool start_array(size_t) { return NotAnId("an array"); }
  bool end_array() { return true; }
  bool parse_error(size_t byte, const std::string& last_token, const nlohmann::detail::exception& e);

  // After the parse: the vocabulary, or why not.
  absl::StatusOr<Vocab> Finish(bool parsed);

 private:
  enum class State { kBefore, kInObject, kDone };
  bool Refuse(const std::string& why) {
    error_ = absl::StrCat(source_, " line ", reader_.line(), ": ", why);
    return false;
  }
  bool NotAnId(const std::string& what);
  bool Id(int64_t id);

  // A token as read; placed by id once all are read (so a large id in a
  // small file allocates nothing).
  struct Entry {
    std::string bytes;
    int32_t id;
    bool added, special;
    int64_t line;
  };
  // A token's key as it was spelled (for messages).
  static std::string KeyOf(const Entry& e) { return e.added ? AddedTokenText(e.bytes) : BytesToGpt2Text(e.bytes); }

  const GuardedReader& reader_;
  const std::string& source_;
  State state_ = State::kBefore;
  std::string key_, key_bytes_;  // the key whose id comes next
  bool key_added_ = false;
  std::vector<Entry> entries_;                     // in the file's order
  absl::flat_hash_map<std::string, int32_t> ids_;  // key -> id
  std::string error_;
};

bool VocabBuilder::key(std::string& key) {
  if (static_cast<int64_t>(entries_.size()) >= kMaxVocabTokens) {
    return Refuse(absl::StrCat("more than ", kMaxVocabTokens, " tokens, the limit for a vocab.json"));
  }
  key_bytes_ = Gpt2TextToBytes(key, &key_added_);
  if (key_bytes_.empty()) return Refuse("the empty string is not a token");
  if (key_bytes_.size() > kMaxTokenBytes) {
    return Refuse(absl::StrCat("token ", Excerpt(key), " is ", key_bytes_.size(), " bytes, over the limit of ",
                               kMaxTokenBytes));
  }
  key_ = std::move(key);
  return true;
}

bool VocabBuilder::NotAnId(const std::string& what) {
  if (state_ == State::kBefore) {
    return Refuse(absl::StrCat("expected a JSON object {\"token\": id, ...}, got ", what));
  }
  return Refuse(absl::StrCat("token ", Excerpt(key_), " has id ", what, ", expected an integer (ids are 0..V-1, each once)"));
}

bool VocabBuilder::Id(int64_t id) {
  if (state_ != State::kInObject) return NotAnId(absl::StrCat("the number ", id));
  if (id < 0 || id >= kMaxVocabTokens) {
    return Refuse(absl::StrCat("token ", Excerpt(key_), " has id ", id, ", expected an integer in [0, ", kMaxVocabTokens,
                               ") (ids are 0..V-1, each once; at most ", kMaxVocabTokens, " tokens)"));
  }
  if (ids_.contains(key_)) return Refuse(absl::StrCat("token ", Excerpt(key_), " appears twice"));
  ids_.emplace(std::move(key_), static_cast<int32_t>(id));
  const bool marked = key_bytes_.size() >= 3 && key_bytes_.front() == '<' && key_bytes_.back() == '>';
  entries_.push_back(Entry{std::move(key_bytes_), static_cast<int32_t>(id), key_added_, key_added_ || marked, reader_.line()});
  key_bytes_.clear();
  return true;
}

bool VocabBuilder::parse_error(size_t byte, const std::string& last_token, const nlohmann::detail::exception& e) {
  // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error while
  // parsing value - invalid literal; last read: '<the whole token>'": keep what happened, quote a short excerpt.
  std::string what = e.what();
  if (const size_t colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
  if (const size_t last = what.find("; last read"); last != std::string::npos) what.resize(last);
  if (what.size() > 2 * kExcerptBytes) what = absl::StrCat(what.substr(0, 2 * kExcerptBytes), "...");
  error_ = absl::StrCat(source_, " line ", reader_.line(), " (byte ", byte, "): invalid JSON: ", what,
                        last_token.empty() ? "" : absl::StrCat(" at ", Excerpt(last_token)));
  return false;
}

absl::StatusOr<Vocab> VocabBuilder::Finish(bool parsed) {
  if (!reader_.refusal().empty()) return absl::InvalidArgumentError(reader_.refusal());
  if (!error_.empty()) return absl::InvalidArgumentError(error_);
  if (!parsed || state_ != State::kDone) return absl::InvalidArgumentError(absl::StrCat(source_, ": invalid JSON"));
  const size_t n = entries_.size();
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": expected a JSON object {\"token\": id, ...}, got one with no tokens"));
  }
  // n ids, each below n and none twice: 0..n-1 each once.
  Vocab vocab;
  vocab.tokens.resize(n);
  vocab.special.resize(n, false);
  std::vector<const Entry*> by_id(n, nullptr);
  for (Entry& e : entries_) {
    const auto id = static_cast<size_t>(e.id);
    auto refuse = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(source_, " line ", e.line, ": ", why, "; ids must be 0..V-1, each once"));
    };
    if (id >= n) return refuse(absl::StrCat("token ", Excerpt(KeyOf(e)), " has id ", id, ", but there are ", n, " tokens"));
    if (by_id[id] != nullptr) {
      return refuse(absl::StrCat("id ", id, " is used twice (by ", Excerpt(KeyOf(*by_id[id])), " and ", Excerpt(KeyOf(e)), ")"));
    }
    by_id[id] = &e;
  }
  for (Entry& e : entries_) {
    vocab.special[static_cast<size_t>(e.id)] = e.special;
    vocab.tokens[static_cast<size_t>(e.id)] = std::move(e.bytes);
  }
  vocab.ids = std::move(ids_);
  return vocab;
}

}  // namespace

absl::StatusOr<Vocab> ReadVocabJson(std::streambuf* in, const std::string& source) {
  GuardedReader reader(in, source);
  VocabBuilder builder(reader, source);
  bool parsed = false;
  try {
    parsed = json::Json::sax_parse(ReaderIterator(&reader), ReaderIterator(nullptr), &builder);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": invalid JSON: ", Excerpt(e.what())));
  }
  return builder.Finish(parsed);
}

}  // namespace psync::tokenizer
