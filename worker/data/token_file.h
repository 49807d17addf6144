// Token stream files, memory-mapped (mapped_file.h):
//
//   llm.c (--data-format=tokens)  a header of 256 little-endian int32:
//        [0] magic 20240520, [1] version 1, [2] token count N (>= 1),
//        the rest unused; then exactly N little-endian uint16 tokens
//        (the file is 1024 + 2N bytes: shorter is truncated, longer has
//        trailing bytes, both refused)
//   bytes (--data-format=bytes)   every byte of the file is a token (V = 256)
//
// Every error is InvalidArgument naming the flag, the file, the header field
// and the expected value; nothing past a bad header is read. A set of llm.c
// files read as one stream (a glob or a directory) is token_stream.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/mapped_file.h"

namespace psync::data {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

struct TokenFile {
  std::shared_ptr<const MappedFile> file;
  const uint8_t* tokens = nullptr;  // first token's bytes, inside file
  int64_t count = 0;                // N
  int width = 2;                    // bytes per token: 2 (llm.c), 1 (bytes)
  std::string kind;                 // "llm.c" or "bytes"

  // Token i (0 <= i < count).
  int64_t at(int64_t i) const {
    const uint8_t* p = tokens + i * width;
    return width == 2 ? (int64_t{p[0]} | (int64_t{p[1]} << 8)) : int64_t{p[0]};
  }
};

absl::StatusOr<TokenFile> OpenLlmcTokens(const std::string& path, const std::string& flag);
absl::StatusOr<TokenFile> OpenByteTokens(const std::string& path, const std::string& flag);

// The token count N of an llm.c file from its header and size alone (the
// same checks as OpenLlmcTokens; the tokens are not read or mapped).
absl::StatusOr<int64_t> ReadLlmcTokenCount(const std::string& path, const std::string& flag);

// Writes an llm.c file (version 1, uint16 tokens) atomically. InvalidArgument
// when there are no tokens, more than 2^31 - 1 (the header's int32 count), or
// an id above 65535 (naming its index).
absl::Status WriteLlmcTokens(const std::string& path, const int32_t* tokens, int64_t count);

}  // namespace psync::data
