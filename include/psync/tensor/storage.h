// Storage: one reference-counted allocation on one device.
//
// CPU memory is 64-byte aligned. CUDA memory comes from the device's
// stream-ordered pool (cudaMallocAsync on the device's compute stream) and is
// returned with cudaFreeAsync on the same stream, so freeing never blocks.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
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
  // A storage whose memory comes and goes while the tensors viewing it stay
  // (ZeRO-3's parameters, ddp/zero_parameters.h): it starts unbound, Bind
  // lends it another storage's memory (at least nbytes; kept alive while
  // bound), Unbind takes it back. A tensor reading an unbound storage throws
  // psync::TensorError naming `what` (e.g. "the parameters of bucket 3")
  // and `why_unbound`, instead of touching freed memory.
  static std::shared_ptr<Storage> Detached(size_t nbytes, Device device, std::string what, std::string why_unbound);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Detached storages only (any other: std::logic_error). Bind: `backing`
  // must be on this device and hold at least nbytes; a bound storage is
  // unbound first. Not thread-safe: one owner binds and unbinds, and nobody
  // may read the tensors meanwhile.
  void Bind(std::shared_ptr<Storage> backing);
  void Unbind();
  // False only for a detached storage without memory now.
  bool bound() const { return data_ != nullptr || !detached_; }
  // Throws TensorError (what and why) when unbound.
  void CheckBound() const;

 private:
  Storage(void* data, size_t nbytes, Device device) : data_(data), nbytes_(nbytes), device_(device) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  std::function<void()> release_;  // Wrap()ped memory: runs instead of the free
  // Detached: the memory lent now (null when unbound), what this storage
  // holds and why it may be unbound (for the error).
  bool detached_ = false;
  std::shared_ptr<Storage> backing_;
  std::string what_, why_unbound_;
};

// Copies nbytes between any two devices (memmove on the host, so ranges
// may overlap there). Copies into host memory wait for the device;
// host-to-device copies return once the source has been read.
void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace psync
