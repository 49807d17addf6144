// A tokenizer's files, in GPT-2's format, so GPT-2's own files load here
// and psync's load in GPT-2's tools (Hugging Face GPT2Tokenizer(vocab_file,
// merges_file), encoder.py):
//
//   vocab.json   {"token": id, ...}: every id 0..V-1 once; a token is its
//                bytes written one character per byte through GPT-2's
//                bytes_to_unicode table (printable bytes as themselves, the
//                rest as U+0100 onwards: a space is "Ġ")
//   merges.txt   "#version: 0.2", then one merge per line, lowest rank
//                first: the two tokens, one space between
//
// A vocab.json key with a character outside that table (an added token)
// stands for its own UTF-8 bytes (gpt2_text.h). A tokenizer is named by the
// directory that holds both files (psync-tokenize train --out=DIR writes
// them), or by its vocab.json (merges.txt beside it).
//
// Reading is bounded (file_limits.h): a file's size is checked before it is
// read, vocab.json streams through a JSON SAX parser and merges.txt line by
// line, and the counts and lengths are checked as they come, so a file past
// a limit is refused at once with one short line. Every token must be
// reachable: a byte, a special token (an added token, or one written <...>
// such as <|endoftext|>: they need no merge), or the result of a merge of
// reachable tokens; a merges.txt cut short (or empty) is refused, naming the
// first token no merge makes. GPT-2's own files are so.
//
// Threads: stateless functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/tokenizer/bpe_tokenizer.h"
#include "worker/tokenizer/gpt2_text.h"

namespace psync::tokenizer {

inline constexpr char kVocabFile[] = "vocab.json";
inline constexpr char kMergesFile[] = "merges.txt";

// From the two files' contents; errors are InvalidArgument naming
// `vocab_source` / `merges_source`, the line and (an excerpt of) the token.
absl::StatusOr<BpeTokenizer> ParseGpt2Files(absl::string_view vocab_json, absl::string_view merges_txt,
                                            const std::string& vocab_source, const std::string& merges_source);

// `path`: a directory holding vocab.json and merges.txt, or a vocab.json.
// NotFound / InvalidArgument naming the file.
absl::StatusOr<BpeTokenizer> LoadTokenizer(const std::string& path);

// The two files' contents for `tokenizer`: tokens in GPT-2's spelling, but
// one that no merge makes keeps its added characters (AddedTokenText), so
// the files load back as the same tokenizer. InvalidArgument when two
// tokens have the same bytes (vocab.json cannot hold both).
struct Gpt2FilesText {
  std::string vocab_json, merges_txt;
};
absl::StatusOr<Gpt2FilesText> FormatGpt2Files(const BpeTokenizer& tokenizer);

// Writes DIR/vocab.json and DIR/merges.txt (each atomically; DIR is created).
absl::Status SaveTokenizer(const BpeTokenizer& tokenizer, const std::string& dir);

}  // namespace psync::tokenizer
