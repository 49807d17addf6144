#include "worker/tokenizer/gpt2_files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <streambuf>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/json.h"
#include "psync/common/status_macros.h"
#include "worker/tokenizer/file_limits.h"
#include "worker/tokenizer/merges_txt.h"
#include "worker/tokenizer/vocab_json.h"

namespace psync::tokenizer {
namespace {

// A read-only stream over text already in memory (no copy).
class ViewBuf : public std::streambuf {
 public:
  explicit ViewBuf(absl::string_view text) {
    char* p = const_cast<char*>(text.data());  // get area only: never written through
    setg(p, p, p + text.size());
  }
};

// Refused before reading: no such file, not a regular file (a FIFO could
// block, a device never end), or over `limit` bytes (GPT-2's file is `gpt2`).
absl::Status CheckFile(const std::string& path, int64_t limit, const char* gpt2) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  if (st.st_size > limit) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.st_size, " bytes, over the limit of ", limit, " (", limit >> 20,
                                                   " MiB; GPT-2's is ", gpt2, ")"));
  }
  return absl::OkStatus();
}

// Each token a byte, a special token, or made by a merge of reachable
// tokens (a breadth-first walk over the merges by their parts).
absl::Status CheckReachable(const BpeTokenizer& t, const std::vector<bool>& special, const std::string& vocab_source,
                            const std::string& merges_source) {
  const size_t n = t.vocab().size();
  const std::vector<MergeRule>& merges = t.merges();
  std::vector<uint32_t> first(n + 1, 0);  // merges with token id as a part: uses[first[id] .. first[id + 1])
  for (const MergeRule& m : merges) {
    ++first[static_cast<size_t>(m.left) + 1];
    ++first[static_cast<size_t>(m.right) + 1];
  }
  for (size_t id = 0; id < n; ++id) first[id + 1] += first[id];
  std::vector<uint32_t> uses(first[n]), next(first.begin(), first.end() - 1);
  for (uint32_t i = 0; i < merges.size(); ++i) {
    uses[next[static_cast<size_t>(merges[i].left)]++] = i;
    uses[next[static_cast<size_t>(merges[i].right)]++] = i;
  }
  std::vector<bool> reached(n, false);
  std::vector<int32_t> queue;
  for (size_t id = 0; id < n; ++id) {
    if (t.vocab()[id].size() != 1) continue;
    reached[id] = true;
    queue.push_back(static_cast<int32_t>(id));
  }
  while (!queue.empty()) {
    const auto id = static_cast<size_t>(queue.back());
    queue.pop_back();
    for (uint32_t u = first[id]; u < first[id + 1]; ++u) {
      const MergeRule& m = merges[uses[u]];
      const auto l = static_cast<size_t>(m.left), r = static_cast<size_t>(m.right), out = static_cast<size_t>(m.result);
      if (reached[l] && reached[r] && !reached[out]) {
        reached[out] = true;
        queue.push_back(m.result);
      }
    }
  }
  for (size_t id = 0; id < n; ++id) {
    if (reached[id] || special[id]) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        merges_source, ": no merge makes token ", Excerpt(BytesToGpt2Text(t.vocab()[id])), " (id ", id, " of ", vocab_source,
        "), so it is never encoded; is the file cut short? (", merges.size(), " merges for ", n, " tokens)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<BpeTokenizer> Build(Vocab vocab, std::vector<MergeRule> merges, const std::string& vocab_source,
                                   const std::string& merges_source) {
  PSYNC_ASSIGN_OR_RETURN(BpeTokenizer t, BpeTokenizer::Create(std::move(vocab.tokens), std::move(merges),
                                                              absl::StrCat(vocab_source, " + ", merges_source)));
  PSYNC_RETURN_IF_ERROR(CheckReachable(t, vocab.special, vocab_source, merges_source));
  return t;
}

}  // namespace

absl::StatusOr<BpeTokenizer> ParseGpt2Files(absl::string_view vocab_json, absl::string_view merges_txt,
                                            const std::string& vocab_source, const std::string& merges_source) {
  ViewBuf vocab_buf(vocab_json), merges_buf(merges_txt);
  PSYNC_ASSIGN_OR_RETURN(Vocab vocab, ReadVocabJson(&vocab_buf, vocab_source));
  PSYNC_ASSIGN_OR_RETURN(std::vector<MergeRule> merges, ReadMergesTxt(&merges_buf, merges_source, vocab.ids));
  return Build(std::move(vocab), std::move(merges), vocab_source, merges_source);
}

absl::StatusOr<BpeTokenizer> LoadTokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
  const std::string vocab_path = fs::is_directory(p, ec) ? (p / kVocabFile).string() : path;
  const std::string merges_path = (dir / kMergesFile).string();
  // Both checked before either is read.
  PSYNC_RETURN_IF_ERROR(CheckFile(vocab_path, kMaxVocabFileBytes, "about 1 MB"));
  PSYNC_RETURN_IF_ERROR(CheckFile(merges_path, kMaxMergesFileBytes, "about 456 kB"));
  std::filebuf vocab_file, merges_file;
  if (vocab_file.open(vocab_path, std::ios::in | std::ios::binary) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_path, ": cannot open: ", std::strerror(errno)));
  }
  PSYNC_ASSIGN_OR_RETURN(Vocab vocab, ReadVocabJson(&vocab_file, vocab_path));
  vocab_file.close();
  if (merges_file.open(merges_path, std::ios::in | std::ios::binary) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(merges_path, ": cannot open: ", std::strerror(errno)));
  }
  PSYNC_ASSIGN_OR_RETURN(std::vector<MergeRule> merges, ReadMergesTxt(&merges_file, merges_path, vocab.ids));
  return Build(std::move(vocab), std::move(merges), vocab_path, merges_path);
}

absl::StatusOr<Gpt2FilesText> FormatGpt2Files(const BpeTokenizer& tokenizer) {
  const size_t n = tokenizer.vocab().size();
  std::vector<bool> made(n, false);
  for (const MergeRule& m : tokenizer.merges()) made[static_cast<size_t>(m.result)] = true;
  // vocab.json by id, so the file reads in id order (GPT-2's does too).
  json::Json vocab = json::Json::object();
  std::vector<std::string> names(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& bytes = tokenizer.vocab()[id];
    names[id] = made[id] || bytes.size() == 1 ? BytesToGpt2Text(bytes) : AddedTokenText(bytes);
    if (vocab.contains(names[id])) {
      return absl::InvalidArgumentError(absl::StrCat("token ", id, " has the same bytes as token ",
                                                     vocab[names[id]].get<int64_t>(), ": vocab.json cannot hold both"));
    }
    vocab[names[id]] = id;
  }
  Gpt2FilesText out{json::Serialize(vocab), "#version: 0.2\n"};
  for (const MergeRule& m : tokenizer.merges()) absl::StrAppend(&out.merges_txt, names[m.left], " ", names[m.right], "\n");
  return out;
}

absl::Status SaveTokenizer(const BpeTokenizer& tokenizer, const std::string& dir) {
  PSYNC_ASSIGN_OR_RETURN(Gpt2FilesText files, FormatGpt2Files(tokenizer));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(dir, ": cannot create the directory: ", ec.message()));
  PSYNC_RETURN_IF_ERROR(WriteFileAtomically((std::filesystem::path(dir) / kVocabFile).string(), files.vocab_json));
  return WriteFileAtomically((std::filesystem::path(dir) / kMergesFile).string(), files.merges_txt);
}

}  // namespace psync::tokenizer
