// Storage: one reference-counted allocation on one device.
//
// CPU memory is 64-byte aligned. CUDA memory comes from the device's
// stream-ordered pool (cudaMallocAsync on the device's compute stream) and is
// returned with cudaFreeAsync on the same stream, so freeing never blocks.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "psync/tensor/device.h"

namespace psync {

class Storage {
 public:
  // Throws psync::TensorError when the allocation fails (e.g. CUDA OOM).
  static std::shared_ptr<Storage> Allocate(size_t nbytes, Device device);
  // Memory allocated by someone else (a process group's shared-memory
  // buffer): `release` runs, instead of a free, when the last tensor using
  // it is gone.
  static std::shared_ptr<Storage> Wrap(void* data, size_t nbytes, Device device, std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t nbytes, Device device) : data_(data), nbytes_(nbytes), device_(device) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  std::function<void()> release_;  // Wrap()ped memory: runs instead of the free
};

// Copies nbytes between any two devices (memmove on the host, so ranges
// may overlap there). Copies into host memory wait for the device;
// host-to-device copies return once the source has been read.
void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace psync
