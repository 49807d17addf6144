// The training set and the initial weights of psync-worker.
//
// Data: --data FILE (safetensors, x [N,in] and y [N,out], F32) or a seeded
// synthetic regression set (same on every rank for the same --seed).
// Weights: --init FILE (layers.{i}.weight [out,in], layers.{i}.bias [out]);
// without it the MLP's own seeded initialisation (worker/nn) is used.
// Every validation error is InvalidArgument naming the file and the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/runtime/checkpoint/safetensors.h"
#include "worker/tensor/tensor.h"

namespace psync::runtime {

struct Dataset {
  int64_t rows = 0, in = 0, out = 0;
  std::vector<float> x;  // [rows, in] row-major
  std::vector<float> y;  // [rows, out]
  std::string source;    // file name or "synthetic(seed=S)"
};

absl::StatusOr<Dataset> LoadDataset(const std::string& path, int64_t in, int64_t out);
Dataset SyntheticDataset(uint64_t seed, int64_t rows, int64_t in, int64_t out);

// x [rows.size(), in] and y [rows.size(), out] on `device`.
void GatherRows(const Dataset& d, const std::vector<int64_t>& rows, Device device, Tensor* x, Tensor* y);

// Parameter names in registration order: layers.0.weight, layers.0.bias, ...
std::vector<std::string> MlpParamNames(const std::vector<int64_t>& widths);
std::vector<Shape> MlpParamShapes(const std::vector<int64_t>& widths);

// Reads and validates --init: exactly the MLP's names with the MLP's shapes;
// returned in registration order.
absl::StatusOr<NamedTensors> LoadInit(const std::string& path, const std::vector<int64_t>& widths);

}  // namespace psync::runtime
