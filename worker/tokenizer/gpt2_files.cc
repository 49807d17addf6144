#include "worker/tokenizer/gpt2_files.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"
#include "common/json.h"
#include "common/status_macros.h"

namespace psync::tokenizer {
namespace {

// bytes_to_unicode of GPT-2's encoder.py: '!'..'~', '¡'..'¬', '®'..'ÿ' stand
// for themselves; the other 68 bytes, in order, for U+0100, U+0101, ...
std::array<uint32_t, 256> MakeByteTable() {
  std::array<uint32_t, 256> t{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t[b] = printable ? b : next++;
  }
  return t;
}
const std::array<uint32_t, 256>& ByteTable() {
  static const std::array<uint32_t, 256> table = MakeByteTable();
  return table;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// GPT-2 text (valid UTF-8: the JSON parser checked it) -> bytes: a table
// character is its byte; any other character stands for its own UTF-8.
std::string Gpt2TextToBytes(const std::string& text) {
  static const auto* inverse = [] {
    auto* m = new absl::flat_hash_map<uint32_t, uint8_t>();
    for (int b = 0; b < 256; ++b) (*m)[ByteTable()[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);
    return m;
  }();
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    const size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (size_t k = 1; k < len && i + k < text.size(); ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3F);
    auto it = inverse->find(cp);
    if (it != inverse->end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out.append(text, i, len);
    }
    i += len;
  }
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open"));
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) return absl::InvalidArgumentError(absl::StrCat(path, ": read failed"));
  return s.str();
}

absl::StatusOr<std::vector<std::string>> ParseVocab(const std::string& text, const std::string& source,
                                                    absl::flat_hash_map<std::string, int32_t>* ids) {
  absl::StatusOr<json::Json> parsed = json::Parse(text);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", parsed.status().message()));
  if (!parsed->is_object() || parsed->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": expected a JSON object {\"token\": id, ...}, got a ",
                                                   json::TypeName(*parsed), parsed->is_object() ? " with no tokens" : ""));
  }
  const size_t n = parsed->size();
  std::vector<std::string> vocab(n);
  std::vector<bool> seen(n, false);
  for (const auto& [key, value] : parsed->items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": token ", json::Quote(key), " has id ", value.dump(),
                                                     ", expected an integer in [0, ", n,
                                                     ") (ids must be 0..V-1, each once)"));
    }
    const auto id = value.get<int64_t>();
    if (seen[static_cast<size_t>(id)]) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": id ", id, " is used twice (by ", json::Quote(key),
                                                     " and another token); ids must be 0..V-1, each once"));
    }
    seen[static_cast<size_t>(id)] = true;
    vocab[static_cast<size_t>(id)] = Gpt2TextToBytes(key);
    (*ids)[key] = static_cast<int32_t>(id);
  }
  return vocab;
}

absl::StatusOr<std::vector<MergeRule>> ParseMerges(const std::string& text, const std::string& source,
                                                   const absl::flat_hash_map<std::string, int32_t>& ids) {
  std::vector<MergeRule> merges;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && absl::StartsWith(line, "#version"))) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(source, " line ", line_no, ": ", json::Quote(line),
                                                     " is not two tokens separated by one space"));
    }
    MergeRule m;
    int32_t* slots[3] = {&m.left, &m.right, &m.result};
    const std::string names[3] = {std::string(parts[0]), std::string(parts[1]), absl::StrCat(parts[0], parts[1])};
    for (int k = 0; k < 3; ++k) {
      auto it = ids.find(names[k]);
      if (it == ids.end()) {
        return absl::InvalidArgumentError(absl::StrCat(source, " line ", line_no, ": ", k == 2 ? "the merged token " : "token ",
                                                       json::Quote(names[k]), " is not in the vocabulary"));
      }
      *slots[k] = it->second;
    }
    merges.push_back(m);
  }
  return merges;
}

}  // namespace

uint32_t ByteToCodePoint(uint8_t byte) { return ByteTable()[byte]; }

std::string BytesToGpt2Text(const std::string& bytes) {
  std::string out;
  for (char c : bytes) AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(c)), &out);
  return out;
}

absl::StatusOr<BpeTokenizer> ParseGpt2Files(const std::string& vocab_json, const std::string& merges_txt,
                                            const std::string& vocab_source, const std::string& merges_source) {
  absl::flat_hash_map<std::string, int32_t> ids;
  PSYNC_ASSIGN_OR_RETURN(std::vector<std::string> vocab, ParseVocab(vocab_json, vocab_source, &ids));
  PSYNC_ASSIGN_OR_RETURN(std::vector<MergeRule> merges, ParseMerges(merges_txt, merges_source, ids));
  return BpeTokenizer::Create(std::move(vocab), std::move(merges), absl::StrCat(vocab_source, " + ", merges_source));
}

absl::StatusOr<BpeTokenizer> LoadTokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
  const std::string vocab_path = fs::is_directory(p, ec) ? (p / kVocabFile).string() : path;
  const std::string merges_path = (dir / kMergesFile).string();
  PSYNC_ASSIGN_OR_RETURN(std::string vocab, ReadFile(vocab_path));
  PSYNC_ASSIGN_OR_RETURN(std::string merges, ReadFile(merges_path));
  return ParseGpt2Files(vocab, merges, vocab_path, merges_path);
}

absl::Status SaveTokenizer(const BpeTokenizer& tokenizer, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(dir, ": cannot create the directory: ", ec.message()));
  // vocab.json by id, so the file reads in id order (GPT-2's does too).
  json::Json vocab = json::Json::object();
  std::vector<std::string> names(tokenizer.vocab().size());
  for (size_t id = 0; id < names.size(); ++id) {
    names[id] = BytesToGpt2Text(tokenizer.vocab()[id]);
    if (vocab.contains(names[id])) {
      return absl::InvalidArgumentError(absl::StrCat("token ", id, " has the same bytes as token ",
                                                     vocab[names[id]].get<int64_t>(), ": vocab.json cannot hold both"));
    }
    vocab[names[id]] = id;
  }
  std::string merges = "#version: 0.2\n";
  for (const MergeRule& m : tokenizer.merges()) absl::StrAppend(&merges, names[m.left], " ", names[m.right], "\n");
  PSYNC_RETURN_IF_ERROR(WriteFileAtomically((std::filesystem::path(dir) / kVocabFile).string(), json::Serialize(vocab)));
  return WriteFileAtomically((std::filesystem::path(dir) / kMergesFile).string(), merges);
}

}  // namespace psync::tokenizer
