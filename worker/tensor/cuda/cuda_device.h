// The CUDA device runtime of psync_tensor: device count, stream-ordered
// memory, copies, the current device, synchronization. (Kernels are behind
// the op families' interfaces: ops/*_kernels.h, implemented in cuda/*.cu.)
//
// This header has no CUDA types so that it compiles without the toolkit.
// With CUDA (PSYNC_WITH_CUDA) the functions live in cuda_device.cc; without
// it cuda_stub.cc defines them all to throw TensorError (DeviceCount: 0).
//
// Every function that takes `device` runs on that device's compute stream
// (see cuda_context.h) and returns without waiting, except where noted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "psync/tensor/device.h"

namespace psync::cuda_device {

// Message used by every CUDA path of a build without CUDA.
inline constexpr const char* kNoCudaMessage =
    "psync was built without CUDA support; rebuild with nvcc on PATH";

// Number of visible devices; 0 (never an error) without driver or GPU.
// When 0, *why (if non-null) gets the reason.
int DeviceCount(std::string* why);

// Stream-ordered allocation on the device's compute stream. Allocate throws
// TensorError on failure; Free never throws (it runs in destructors).
void* Allocate(size_t nbytes, int device);
void Free(void* ptr, int device) noexcept;

// Copies nbytes between any two devices (at least one of them CUDA). Copies
// into host memory wait for completion; host-to-device copies return once
// the source has been read (the host buffer may be reused at once).
void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

// Makes `device` current for the calling thread (cudaSetDevice). A process
// that works on one GPU other than cuda:0 (psync-worker with LOCAL_RANK > 0)
// calls it first: otherwise every DeviceGuard restores the thread's default
// device 0 on exit, and since CUDA 12 cudaSetDevice(0) creates a primary
// context (hundreds of MiB) on GPU 0 in every rank's process.
void SetCurrentDevice(int device);

// Waits for everything queued on the device's compute stream.
void Synchronize(int device);

// The high-water mark of the device's memory pool (every tensor's storage)
// in bytes since the process started or the last ResetPeakBytes: a step's
// peak GPU memory. 0 without CUDA.
uint64_t PeakBytes(int device);
void ResetPeakBytes(int device);
// The bytes the device's memory pool has lent now (in stream order: a
// tensor freed is counted out once its free is queued). 0 without CUDA.
uint64_t InUseBytes(int device);

}  // namespace psync::cuda_device
