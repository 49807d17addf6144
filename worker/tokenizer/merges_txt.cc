#include "worker/tokenizer/merges_txt.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/tokenizer/file_limits.h"

namespace psync::tokenizer {
namespace {

enum class LineEnd { kLine, kEndOfInput, kTooLong, kFileTooLong };

// Reads up to the next '\n' (dropped) into *line, which never holds more
// than kMaxMergesLineBytes + 1 bytes: a longer line stops there (kTooLong),
// unread. *bytes counts what the stream gave, against kMaxMergesFileBytes.
LineEnd ReadLine(std::streambuf* in, std::string* line, int64_t* bytes) {
  line->clear();
  for (;;) {
    const int c = in->sbumpc();
    if (c == EOF) return line->empty() ? LineEnd::kEndOfInput : LineEnd::kLine;
    if (++*bytes > kMaxMergesFileBytes) return LineEnd::kFileTooLong;
    if (c == '\n') return LineEnd::kLine;
    line->push_back(static_cast<char>(c));
    if (line->size() > kMaxMergesLineBytes) return LineEnd::kTooLong;
  }
}

}  // namespace

absl::StatusOr<std::vector<MergeRule>> ReadMergesTxt(std::streambuf* in, const std::string& source,
                                                     const absl::flat_hash_map<std::string, int32_t>& ids) {
  std::vector<MergeRule> merges;
  std::string text;
  int64_t bytes = 0;
  for (int64_t line_no = 1;; ++line_no) {
    const LineEnd end = ReadLine(in, &text, &bytes);
    if (end == LineEnd::kEndOfInput) break;
    auto refuse = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(source, " line ", line_no, ": ", why));
    };
    if (end == LineEnd::kFileTooLong) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": more than ", kMaxMergesFileBytes, " bytes, the limit for a merges.txt"));
    }
    if (end == LineEnd::kTooLong) {
      return refuse(absl::StrCat("longer than ", kMaxMergesLineBytes, " bytes (the limit for a line): ",
                                  Excerpt(absl::string_view(text).substr(0, kExcerptBytes), /*prefix=*/true)));
    }
    absl::string_view line = text;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && absl::StartsWith(line, "#version"))) continue;
    const size_t space = line.find(' ');
    if (space == 0 || space == absl::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != absl::string_view::npos) {
      return refuse(absl::StrCat(Excerpt(line), " is not two tokens separated by one space"));
    }
    if (static_cast<int64_t>(merges.size()) >= kMaxMerges) {
      return refuse(absl::StrCat("more than ", kMaxMerges, " merges, the limit for a merges.txt"));
    }
    const std::string names[3] = {std::string(line.substr(0, space)), std::string(line.substr(space + 1)),
                                  absl::StrCat(line.substr(0, space), line.substr(space + 1))};
    MergeRule m;
    int32_t* slots[3] = {&m.left, &m.right, &m.result};
    for (int k = 0; k < 3; ++k) {
      auto it = ids.find(names[k]);
      if (it == ids.end()) {
        return refuse(absl::StrCat(k == 2 ? "the merged token " : "token ", Excerpt(names[k]), " is not in the vocabulary"));
      }
      *slots[k] = it->second;
    }
    merges.push_back(m);
  }
  return merges;
}

}  // namespace psync::tokenizer
