// CPU copy kernels: fill, and strided copies with dtype conversion.
#include <cstring>
#include <type_traits>

#include "worker/tensor/cpu/cpu_util.h"
#include "worker/tensor/ops/copy_kernels.h"

namespace psync::ops {
namespace {

template <typename To, typename From>
void CopyRuns(const Tensor& dst, const Tensor& src) {
  To* d = static_cast<To*>(dst.raw_data());
  const From* s = static_cast<const From*>(src.raw_data());
  cpu::ForEachRun(dst.shape(), dst.strides(), src.strides(),
                  [&](int64_t od, int64_t os, int64_t n, int64_t sd, int64_t ss) {
                    To* y = d + od;
                    const From* x = s + os;
                    if constexpr (std::is_same_v<To, BFloat16> && std::is_same_v<From, float>) {
                      if (sd == 1 && ss == 1) {  // the bits directly: this loop vectorizes
                        uint16_t* __restrict bits = reinterpret_cast<uint16_t*>(y);
                        for (int64_t i = 0; i < n; ++i) bits[i] = cpu::Bf16Bits(x[i]);
                        return;
                      }
                    }
                    if (sd == 1 && ss == 1) {
                      for (int64_t i = 0; i < n; ++i) y[i] = cpu::Convert<To>(x[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) y[i * sd] = cpu::Convert<To>(x[i * ss]);
                    }
                  });
}

class CpuCopy final : public CopyKernels {
 public:
  void Fill(const Tensor& dst, double value) const override {
    PSYNC_DISPATCH_ALL_TYPES(dst.dtype(), "Fill", [&] {
      scalar_t* y = static_cast<scalar_t*>(dst.raw_data());
      const scalar_t v = cpu::Convert<scalar_t>(value);
      for (int64_t i = 0, n = dst.numel(); i < n; ++i) y[i] = v;
    });
  }

  void Copy(const Tensor& dst, const Tensor& src) const override {
    if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
      // memmove: views of one storage may overlap.
      std::memmove(dst.raw_data(), src.raw_data(), dst.nbytes());
      return;
    }
    PSYNC_DISPATCH_ALL_TYPES(dst.dtype(), "Copy", [&] {
      using To = scalar_t;
      PSYNC_DISPATCH_ALL_TYPES(src.dtype(), "Copy", [&] { CopyRuns<To, scalar_t>(dst, src); });
    });
  }
};

}  // namespace

const CopyKernels& CpuCopyKernels() {
  static const CpuCopy kernels;
  return kernels;
}

}  // namespace psync::ops
