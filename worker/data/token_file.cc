#include "worker/data/token_file.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "psync/common/status_macros.h"
#include "worker/data/source_error.h"

namespace psync::data {

namespace {

int32_t LittleEndianInt32(const uint8_t* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24));
}

absl::StatusOr<std::shared_ptr<const MappedFile>> Map(const std::string& path, const std::string& flag) {
  absl::StatusOr<std::shared_ptr<const MappedFile>> f = MappedFile::Open(path);
  if (!f.ok()) return WithFlag(f.status(), flag);
  return f;
}

// The header checks of an llm.c file of `file_size` bytes whose first
// bytes are `h` (at least kLlmcHeaderBytes of them when the size allows):
// the token count N.
absl::StatusOr<int64_t> CheckLlmcHeader(const uint8_t* h, int64_t file_size, const std::string& path,
                                        const std::string& flag) {
  auto err = [&](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", msg));
  };
  if (file_size < kLlmcHeaderBytes) {
    return err(absl::StrCat("truncated header: the file is ", file_size, " bytes, expected at least the ",
                            kLlmcHeaderBytes, "-byte llm.c header (256 x int32)"));
  }
  const int32_t magic = LittleEndianInt32(h);
  if (magic != kLlmcMagic) {
    return err(absl::StrCat("magic (header int32 0) is ", magic, ", expected ", kLlmcMagic,
                            " (an llm.c token file; for raw bytes as tokens use --data-format=bytes)"));
  }
  const int32_t version = LittleEndianInt32(h + 4);
  if (version != kLlmcVersion) {
    return err(absl::StrCat("version (header int32 1) is ", version, ", expected ", kLlmcVersion, " (uint16 tokens)"));
  }
  const int32_t count = LittleEndianInt32(h + 8);
  if (count < 1) return err(absl::StrCat("token count (header int32 2) is ", count, ", expected at least 1"));
  const int64_t want = kLlmcHeaderBytes + 2 * int64_t{count};
  if (file_size != want) {
    return err(absl::StrCat("token count (header int32 2) is ", count, ", so expected a file of ", kLlmcHeaderBytes,
                            " + 2 x ", count, " = ", want, " bytes, got ", file_size,
                            file_size < want ? " (truncated)" : " (trailing bytes)"));
  }
  return int64_t{count};
}

}  // namespace

absl::StatusOr<TokenFile> OpenLlmcTokens(const std::string& path, const std::string& flag) {
  PSYNC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, Map(path, flag));
  PSYNC_ASSIGN_OR_RETURN(int64_t count, CheckLlmcHeader(file->data(), file->size(), path, flag));
  TokenFile t;
  t.tokens = file->data() + kLlmcHeaderBytes;
  t.count = count;
  t.width = 2;
  t.kind = "llm.c";
  t.file = std::move(file);
  return t;
}

absl::StatusOr<int64_t> ReadLlmcTokenCount(const std::string& path, const std::string& flag) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return absl::NotFoundError(absl::StrCat(flag, " ", path, ": no such file"));
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot stat: ", ec.message()));
  uint8_t header[kLlmcHeaderBytes] = {};
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot open"));
  f.read(reinterpret_cast<char*>(header), std::min<int64_t>(size, kLlmcHeaderBytes));
  if (f.bad()) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot read the header"));
  return CheckLlmcHeader(header, size, path, flag);
}

absl::Status WriteLlmcTokens(const std::string& path, const int32_t* tokens, int64_t count) {
  if (count < 1 || count > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", count, " tokens; an llm.c file holds 1 to ", INT32_MAX,
                                                   " (its header counts them in an int32)"));
  }
  std::string bytes(static_cast<size_t>(kLlmcHeaderBytes + 2 * count), '\0');
  auto put32 = [&](size_t at, int32_t v) {
    for (int k = 0; k < 4; ++k) bytes[at + k] = static_cast<char>((static_cast<uint32_t>(v) >> (8 * k)) & 0xFF);
  };
  put32(0, kLlmcMagic);
  put32(4, kLlmcVersion);
  put32(8, static_cast<int32_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] > 0xFFFF) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": token ", i, " is id ", tokens[i],
                                                     ", but llm.c files hold uint16 ids (0..65535)"));
    }
    const size_t at = static_cast<size_t>(kLlmcHeaderBytes + 2 * i);
    bytes[at] = static_cast<char>(tokens[i] & 0xFF);
    bytes[at + 1] = static_cast<char>(tokens[i] >> 8);
  }
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<TokenFile> OpenByteTokens(const std::string& path, const std::string& flag) {
  PSYNC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, Map(path, flag));
  if (file->size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": the file is empty, expected at least 1 byte"));
  }
  TokenFile t;
  t.tokens = file->data();
  t.count = file->size();
  t.width = 1;
  t.kind = "bytes";
  t.file = std::move(file);
  return t;
}

}  // namespace psync::data
