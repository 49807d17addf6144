// Helpers shared by the CPU kernels (internal to worker/tensor/cpu).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "worker/tensor/cpu/vec_math.h"
#include "psync/tensor/half.h"
#include "psync/tensor/tensor.h"
#include "worker/tensor/typed_data.h"

namespace psync::cpu {

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

// Element conversion: 16-bit types go through float (round to nearest even;
// bfloat16 with vec_math.h's branch-free Load/Store, the same bits as
// BFloat16's own conversions, so copies vectorize).
template <typename To, typename From>
inline To Convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return Store<BFloat16>(static_cast<float>(Convert<float>(v)));
  } else if constexpr (std::is_same_v<From, BFloat16>) {
    return static_cast<To>(Load<float>(v));
  } else if constexpr (kIsHalf<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (kIsHalf<From>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Typed element pointers of a tensor for a kernel (typed_data.h).
using kernel::In;
using kernel::Out;

// Walks two same-shaped strided layouts in row-major order, one innermost
// run at a time: fn(offset_a, offset_b, n, inner_stride_a, inner_stride_b).
// Adjacent dimensions that are contiguous with each other in both layouts
// are merged first, so a contiguous pair is one run.
template <typename Fn>
void ForEachRun(const Shape& shape, const Strides& sa, const Strides& sb, Fn fn) {
  std::vector<int64_t> dims, a, b;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!dims.empty() && a.back() == sa[i] * shape[i] && b.back() == sb[i] * shape[i]) {
      dims.back() *= shape[i];
      a.back() = sa[i];
      b.back() = sb[i];
      continue;
    }
    dims.push_back(shape[i]);
    a.push_back(sa[i]);
    b.push_back(sb[i]);
  }
  if (NumelOf(shape) == 0) return;
  if (dims.empty()) {
    fn(int64_t{0}, int64_t{0}, int64_t{1}, int64_t{1}, int64_t{1});
    return;
  }
  const size_t inner = dims.size() - 1;
  std::vector<int64_t> idx(inner, 0);
  int64_t off_a = 0, off_b = 0;
  while (true) {
    fn(off_a, off_b, dims[inner], a[inner], b[inner]);
    if (inner == 0) return;
    size_t d = inner - 1;
    while (true) {
      ++idx[d];
      off_a += a[d];
      off_b += b[d];
      if (idx[d] < dims[d]) break;
      off_a -= a[d] * dims[d];
      off_b -= b[d] * dims[d];
      idx[d] = 0;
      if (d == 0) return;
      --d;
    }
  }
}

}  // namespace psync::cpu
