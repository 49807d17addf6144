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
// stands for its own UTF-8 bytes. A tokenizer is named by the directory that
// holds both files (psync-tokenize train --out=DIR writes them), or by its
// vocab.json (merges.txt beside it).
//
// Threads: stateless functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/tokenizer/bpe_tokenizer.h"

namespace psync::tokenizer {

inline constexpr char kVocabFile[] = "vocab.json";
inline constexpr char kMergesFile[] = "merges.txt";

// GPT-2's bytes_to_unicode: byte -> code point, and its UTF-8 text for all bytes.
uint32_t ByteToCodePoint(uint8_t byte);
std::string BytesToGpt2Text(const std::string& bytes);

// From the two files' contents; errors are InvalidArgument naming
// `vocab_source` / `merges_source`, the line or key.
absl::StatusOr<BpeTokenizer> ParseGpt2Files(const std::string& vocab_json, const std::string& merges_txt,
                                            const std::string& vocab_source, const std::string& merges_source);

// `path`: a directory holding vocab.json and merges.txt, or a vocab.json.
// NotFound / InvalidArgument naming the file.
absl::StatusOr<BpeTokenizer> LoadTokenizer(const std::string& path);

// Writes DIR/vocab.json and DIR/merges.txt (each atomically; DIR is created).
absl::Status SaveTokenizer(const BpeTokenizer& tokenizer, const std::string& dir);

}  // namespace psync::tokenizer
