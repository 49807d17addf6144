#include "worker/data/gzip_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"

namespace psync::data {

namespace {
gzFile Gz(void* f) { return static_cast<gzFile>(f); }
}  // namespace

absl::StatusOr<std::unique_ptr<GzipReader>> GzipReader::Open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, expected a file"));
  }
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open: ", errno != 0 ? std::strerror(errno) : "zlib could not allocate"));
  }
  gzbuffer(f, 1 << 18);  // fewer read() calls than the 8 KiB default
  return std::unique_ptr<GzipReader>(new GzipReader(path, f));
}

GzipReader::~GzipReader() { gzclose(Gz(file_)); }

bool GzipReader::compressed() const { return gzdirect(Gz(file_)) == 0; }

absl::StatusOr<int64_t> GzipReader::Read(void* dst, int64_t n) {
  char* out = static_cast<char*>(dst);
  int64_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - got, 1 << 30));
    const int r = gzread(Gz(file_), out + got, chunk);
    int errnum = Z_OK;
    const char* msg = gzerror(Gz(file_), &errnum);
    if (r < 0 || (errnum != Z_OK)) {
      // Z_BUF_ERROR: the compressed stream ended early (a truncated file).
      const bool truncated = errnum == Z_BUF_ERROR;
      std::string what = msg != nullptr ? msg : "?";
      if (absl::StartsWith(what, path_ + ": ")) what = what.substr(path_.size() + 2);  // zlib prefixes the path
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": ", truncated ? "truncated gzip stream" : "corrupt gzip stream", " (zlib: ", what,
                       ") after ", position_ + std::max(r, 0), " uncompressed bytes"));
    }
    if (r == 0) break;  // end of data
    got += r;
    position_ += r;
  }
  return got;
}

absl::StatusOr<std::string> ReadHead(const std::string& path, int64_t n, bool* compressed) {
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<GzipReader> reader, GzipReader::Open(path));
  std::string head(static_cast<size_t>(n), '\0');
  PSYNC_ASSIGN_OR_RETURN(int64_t got, reader->Read(head.data(), n));
  head.resize(static_cast<size_t>(got));
  if (compressed != nullptr) *compressed = reader->compressed();
  return head;
}

}  // namespace psync::data
