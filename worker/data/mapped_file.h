// A whole file mapped read-only (mmap, MAP_SHARED): every rank on a host
// shares the page cache's one copy instead of reading the file into its own
// memory. Pages are read on first touch.
//
// The file must not shrink while mapped (reading a page past its new end
// raises SIGBUS): token files are inputs, written once before training.
// Threads: immutable; share it through shared_ptr.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace psync::data {

class MappedFile {
 public:
  // NotFound when the file does not exist; InvalidArgument naming the file otherwise.
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }  // nullptr for an empty file
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, int64_t size) : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  int64_t size_;
};

}  // namespace psync::data
