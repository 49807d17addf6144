// Helpers shared by the tensor tests.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "psync/tensor/ops.h"
#include "psync/tensor/tensor.h"

namespace psync::testing {

inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

inline Tensor RandomTensor(const Shape& shape, uint32_t seed, Device device = Device::CPU(),
                           float lo = -1.0f, float hi = 1.0f) {
  return Tensor::FromVector(RandomVector(NumelOf(shape), seed, lo, hi), shape, device);
}

// int64 class indices in [0, classes).
inline Tensor RandomLabels(int64_t rows, int64_t classes, uint32_t seed,
                           Device device = Device::CPU()) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, classes - 1);
  std::vector<int64_t> v(static_cast<size_t>(rows));
  for (int64_t& x : v) x = dist(gen);
  return Tensor::FromVector(v, {rows}, device);
}

// Runs `fn`, expects TensorError whose message contains every needle.
template <typename Fn>
void ExpectTensorError(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected TensorError";
  } catch (const TensorError& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) {
      EXPECT_NE(msg.find(n), std::string::npos) << "message \"" << msg << "\" lacks \"" << n << "\"";
    }
  }
}

}  // namespace psync::testing
