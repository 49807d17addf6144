// Sequential reads from a file that may be gzip-compressed (zlib's gz*
// interface: a gzip file is inflated, any other file is read as it is).
// Errors name the file; a gzip stream that ends early or fails its check is
// an error, not a short read.
//
// Threads: one thread at a time (it owns a zlib stream).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace psync::data {

class GzipReader {
 public:
  // NotFound when the file does not exist; InvalidArgument when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<GzipReader>> Open(const std::string& path);
  ~GzipReader();
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;

  // Reads up to `n` bytes; fewer only at the end of the (uncompressed)
  // data. A truncated or corrupt gzip stream is InvalidArgument naming the
  // file and the uncompressed offset where it broke.
  absl::StatusOr<int64_t> Read(void* dst, int64_t n);
  // Uncompressed bytes returned so far.
  int64_t position() const { return position_; }
  // True when the file is gzip-compressed (known after the first Read).
  bool compressed() const;
  const std::string& path() const { return path_; }

 private:
  GzipReader(std::string path, void* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  void* file_;  // gzFile (kept out of this header so zlib.h stays in the .cc)
  int64_t position_ = 0;
};

// Reads the first `n` bytes (fewer if the file is shorter), decompressed.
absl::StatusOr<std::string> ReadHead(const std::string& path, int64_t n, bool* compressed = nullptr);

}  // namespace psync::data
