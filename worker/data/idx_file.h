// The IDX file format (Fashion-MNIST's and MNIST's), gzip-compressed or not:
//
//   bytes 0-1   zero
//   byte  2     element type: 0x08 unsigned byte (the only one accepted;
//               0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64 are refused)
//   byte  3     number of dimensions D
//   D x 4 bytes the dimensions, big-endian unsigned
//   then        prod(dims) elements, nothing after them
//
// So images are magic 0x00000803 (count, rows, cols) and labels 0x00000801
// (count). ReadIdx checks the magic, each dimension, the payload length
// (truncated or trailing bytes) and the gzip stream before returning; every
// error is InvalidArgument naming the flag, the file, the field and the
// expected value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync::data {

struct IdxExpectation {
  int ndim = 0;                        // 3 for images, 1 for labels
  std::string what;                    // "images", "labels"
  std::vector<std::string> dim_names;  // "image count", "rows", "cols"
  std::vector<int64_t> dims;           // expected value per dimension, 0 = any (>= 1)
};

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // prod(dims) bytes
};

// `flag` ("--data") names the source in errors.
absl::StatusOr<IdxArray> ReadIdx(const std::string& path, const IdxExpectation& expect, const std::string& flag);

// The magic number of a D-dimensional unsigned-byte IDX file: 0x00000800 | D.
inline constexpr uint32_t IdxUbyteMagic(int ndim) { return 0x00000800u | static_cast<uint32_t>(ndim); }

}  // namespace psync::data
