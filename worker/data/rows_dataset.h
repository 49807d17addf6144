// The rows formats: a regression table x [N, in], y [N, out] (float32),
// from a safetensors file (--data-format=rows: tensors "x" and "y", nothing
// else) or generated from a seed (synthetic). The table is read once and
// shared by the training and held-out parts (--val-fraction).
//
// Synthetic rows (same on every rank for the same seed):
//   y = sin(x @ T^T) + 0.05 * noise, x ~ U(-1, 1), teacher T ~ U(-2/sqrt(in), 2/sqrt(in)),
//   drawn from SplitMix64 streams (teacher: Mix(seed, 101), rows: Mix(seed, 102)).
//
// Batches: inputs x [b, in], targets y [b, out]; which rows per
// example_order.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/data_options.h"
#include "worker/data/example_dataset.h"

namespace psync::data {

struct RowsTable {
  int64_t rows = 0, in = 0, out = 0;
  std::vector<float> x;  // [rows, in] row-major
  std::vector<float> y;  // [rows, out]
  std::string source;    // file name or "synthetic(seed=S, rows=N)"
};

// Reads and validates a safetensors table: exactly "x" [N, in] and "y"
// [N, out] with N >= 1, finite values; `in`/`out` > 0 must match (0: any).
// Errors are InvalidArgument naming `flag`, the file and the tensor.
absl::StatusOr<RowsTable> LoadRowsTable(const std::string& path, int64_t in, int64_t out,
                                        const std::string& flag = "--data");
RowsTable SyntheticRowsTable(uint64_t seed, int64_t rows, int64_t in, int64_t out);

class RowsDataset final : public ExampleDataset {
 public:
  // Rows [begin, begin + count) of `table`.
  RowsDataset(std::shared_ptr<const RowsTable> table, int64_t begin, int64_t count, bool shuffle, uint64_t seed,
              std::string description);

 private:
  Batch Gather(const std::vector<int64_t>& rows) const override;

  std::shared_ptr<const RowsTable> table_;
};

// Registry factories (data/registry.cc): --data-format=rows and synthetic.
absl::StatusOr<std::unique_ptr<Dataset>> OpenRows(const DataOptions& options);
absl::StatusOr<std::unique_ptr<Dataset>> OpenSynthetic(const DataOptions& options);

}  // namespace psync::data
