#include "worker/data/token_file.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
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

}  // namespace

absl::StatusOr<TokenFile> OpenLlmcTokens(const std::string& path, const std::string& flag) {
  auto err = [&](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", msg));
  };
  PSYNC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, Map(path, flag));
  if (file->size() < kLlmcHeaderBytes) {
    return err(absl::StrCat("truncated header: the file is ", file->size(), " bytes, expected at least the ",
                            kLlmcHeaderBytes, "-byte llm.c header (256 x int32)"));
  }
  const uint8_t* h = file->data();
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
  if (file->size() != want) {
    return err(absl::StrCat("token count (header int32 2) is ", count, ", so expected a file of ", kLlmcHeaderBytes,
                            " + 2 x ", count, " = ", want, " bytes, got ", file->size(),
                            file->size() < want ? " (truncated)" : " (trailing bytes)"));
  }
  TokenFile t;
  t.tokens = h + kLlmcHeaderBytes;
  t.count = count;
  t.width = 2;
  t.kind = "llm.c";
  t.file = std::move(file);
  return t;
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
