#include "psync/tensor/storage.h"

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cpu_allocator.h"
#include "worker/tensor/cuda/cuda_device.h"
#include "psync/tensor/tensor.h"

namespace psync {

std::shared_ptr<Storage> Storage::Allocate(size_t nbytes, Device device) {
  void* data = nullptr;
  if (device.is_cpu()) {
    // 64-byte aligned (one cache line, enough for AVX-512 loads in
    // OpenBLAS), from the caching allocator; a zero-byte storage still gets
    // a real (unique) pointer.
    data = CpuCachingAllocator::Get().Allocate(nbytes);
    if (data == nullptr) {
      throw TensorError("Storage::Allocate: out of CPU memory allocating " +
                        std::to_string(nbytes) + " bytes");
    }
  } else {
    absl::Status st = CheckDeviceAvailable(device);
    if (!st.ok()) throw TensorError("Storage::Allocate: " + std::string(st.message()));
    data = cuda_device::Allocate(nbytes, device.index);  // throws on failure
  }
  // Storage's constructor is private, so no make_shared.
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device));
}

std::shared_ptr<Storage> Storage::Wrap(void* data, size_t nbytes, Device device, std::function<void()> release) {
  std::shared_ptr<Storage> s(new Storage(data, nbytes, device));
  s->release_ = std::move(release);
  return s;
}

std::shared_ptr<Storage> Storage::Detached(size_t nbytes, Device device, std::string what, std::string why_unbound) {
  std::shared_ptr<Storage> s(new Storage(nullptr, nbytes, device));
  s->detached_ = true;
  s->what_ = std::move(what);
  s->why_unbound_ = std::move(why_unbound);
  return s;
}

void Storage::Bind(std::shared_ptr<Storage> backing) {
  if (!detached_) throw std::logic_error("Storage::Bind: not a detached storage");
  if (!backing || backing->nbytes() < nbytes_ || !(backing->device() == device_)) {
    throw std::logic_error(absl::StrCat("Storage::Bind (", what_, "): needs ", nbytes_, " bytes on ", device_.ToString(),
                                        ", got ", backing ? backing->nbytes() : 0, " bytes"));
  }
  data_ = backing->data();
  backing_ = std::move(backing);
}

void Storage::Unbind() {
  if (!detached_) throw std::logic_error("Storage::Unbind: not a detached storage");
  data_ = nullptr;
  backing_.reset();
}

void Storage::CheckBound() const {
  if (bound()) return;
  throw TensorError(absl::StrCat(what_, " are not in memory now: ", why_unbound_));
}

Storage::~Storage() {
  if (detached_) {
    // The memory is backing_'s (released with it).
  } else if (release_) {
    release_();
  } else if (device_.is_cpu()) {
    CpuCachingAllocator::Get().Free(data_, nbytes_);
  } else {
    // cudaFreeAsync on the compute stream: the memory goes back to the pool
    // once the work already queued there (which may still read it) is done.
    cuda_device::Free(data_, device_.index);
  }
}

void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0 || dst == src) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, nbytes);
  } else {
    cuda_device::CopyBytes(dst, dst_device, src, src_device, nbytes);
  }
}

}  // namespace psync
