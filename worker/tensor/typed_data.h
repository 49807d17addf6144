// Typed element pointers of a tensor's data for a kernel, CPU or CUDA: the
// one cast from raw_data() to the storage type a dtype dispatch chose
// (dtype.h, cuda/launch.cuh). The kernels' namespaces bring them in.
#pragma once

#include "psync/tensor/tensor.h"

namespace psync::kernel {

template <typename S>
const S* In(const Tensor& t) {
  return static_cast<const S*>(t.raw_data());
}
template <typename S>
S* Out(const Tensor& t) {
  return static_cast<S*>(t.raw_data());
}

}  // namespace psync::kernel
