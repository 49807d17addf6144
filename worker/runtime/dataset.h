// The training set and the initial weights of psync-worker.
//
// Data: --data FILE (safetensors, x [N,in] and y [N,out], F32) or a seeded
// synthetic regression set (same on every rank for the same --seed). Both
// are worker/data's rows format (data/rows_dataset.h); the names below keep
// today's trainer working until it opens its data through data::Open.
// Weights: --init FILE (layers.{i}.weight [out,in], layers.{i}.bias [out]);
// without it the MLP's own seeded initialisation (worker/nn) is used.
// Every validation error is InvalidArgument naming the file and the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/rows_dataset.h"
#include "worker/runtime/checkpoint/safetensors.h"
#include "worker/tensor/tensor.h"

namespace psync::runtime {

using Dataset = data::RowsTable;

inline absl::StatusOr<Dataset> LoadDataset(const std::string& path, int64_t in, int64_t out) {
  return data::LoadRowsTable(path, in, out, "--data");
}
inline Dataset SyntheticDataset(uint64_t seed, int64_t rows, int64_t in, int64_t out) {
  return data::SyntheticRowsTable(seed, rows, in, out);
}

// x [rows.size(), in] and y [rows.size(), out] on `device`.
void GatherRows(const Dataset& d, const std::vector<int64_t>& rows, Device device, Tensor* x, Tensor* y);

// Parameter names in registration order: layers.0.weight, layers.0.bias, ...
std::vector<std::string> MlpParamNames(const std::vector<int64_t>& widths);
std::vector<Shape> MlpParamShapes(const std::vector<int64_t>& widths);

// Reads and validates --init: exactly the MLP's names with the MLP's shapes;
// returned in registration order.
absl::StatusOr<NamedTensors> LoadInit(const std::string& path, const std::vector<int64_t>& widths);

}  // namespace psync::runtime
