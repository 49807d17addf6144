// ShmSegment: one POSIX shared-memory object (/dev/shm/<name>) mapped into
// this process. Move-only; unmaps on destruction, and the creator also
// unlinks it then unless it did so already (the groups unlink right after
// every peer has mapped it, so a crash later leaves nothing in /dev/shm).
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace psync::comm::shm {

class ShmSegment {
 public:
  // Creates `name` (must not exist), reserves `bytes` of memory for it
  // (ResourceExhausted naming /dev/shm when it is too small: a lazily backed
  // segment would SIGBUS on first touch instead) and maps it, zeroed.
  static absl::StatusOr<ShmSegment> Create(const std::string& name, size_t bytes);
  // Maps an existing segment of at least `bytes`. NotFound when absent.
  static absl::StatusOr<ShmSegment> Open(const std::string& name, size_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ~ShmSegment() { Reset(); }

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name (the mapping stays valid). Idempotent.
  void Unlink();

 private:
  void Reset();
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;  // created by us: unlink on destruction
  bool unlinked_ = false;
};

}  // namespace psync::comm::shm
