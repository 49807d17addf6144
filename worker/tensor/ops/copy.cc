// Fill and Copy: validation, then the device's copy kernels. Copies between
// a CPU and a CUDA tensor move the bytes of a contiguous buffer of the
// destination's dtype (converting and compacting on the source side first).
#include "psync/tensor/ops/copy.h"

#include "worker/tensor/cuda/cuda_device.h"
#include "worker/tensor/ops/check.h"
#include "worker/tensor/ops/copy_kernels.h"

namespace psync::ops {

const CopyKernels& CopyKernelsFor(Device device) {
  return device.is_cpu() ? CpuCopyKernels() : CudaCopyKernels();
}

void Fill(const Tensor& t, double value) {
  check::Args args = {{"t", &t}};
  check::Defined("Fill", args);
  check::Contiguous("Fill", args, {"t", &t});
  if (t.numel() == 0) return;
  CopyKernelsFor(t.device()).Fill(t, value);
}

void Copy(const Tensor& dst, const Tensor& src) {
  check::Args args = {{"dst", &dst}, {"src", &src}};
  check::Defined("Copy", args, /*same_device=*/false);
  Tensor from = src;
  if (src.shape() != dst.shape()) {
    // Flat copies between contiguous buffers of equal size (bucket <-> parameters).
    if (!(src.is_contiguous() && dst.is_contiguous()) || src.numel() != dst.numel()) {
      check::Fail("Copy", args, "shapes differ (only contiguous tensors of equal numel may be copied flat)");
    }
    from = src.Reshape(dst.shape());
  }
  // A tensor copied onto itself (a heal received straight into the live
  // weights) is already there.
  if (dst.numel() == 0 || dst.IsSameView(from)) return;
  if (dst.device() == from.device()) {
    CopyKernelsFor(dst.device()).Copy(dst, from);
    return;
  }
  // Across devices: one contiguous buffer of dst's dtype crosses, converted
  // on the source's device first.
  Tensor staged = from.To(dst.dtype()).Contiguous();
  if (dst.is_contiguous()) {
    CopyBytes(dst.raw_data(), dst.device(), staged.raw_data(), staged.device(), dst.nbytes());
    return;
  }
  Tensor landed = Tensor::Empty(dst.shape(), dst.dtype(), dst.device());
  CopyBytes(landed.raw_data(), landed.device(), staged.raw_data(), staged.device(), dst.nbytes());
  CopyKernelsFor(dst.device()).Copy(dst, landed);
}

void Synchronize(Device device) {
  if (device.is_cpu()) return;  // CPU ops are synchronous
  cuda_device::Synchronize(device.index);
}

}  // namespace psync::ops
