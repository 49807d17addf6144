// Where the training / held-out parts of one file begin and end
// (DataPart, --val-fraction): the tail floor(F * N) units are held out.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/data_options.h"

namespace psync::data {

struct PartRange {
  int64_t begin = 0, count = 0;
};

// The range of `options.part` within `total` units (rows, images, tokens:
// `unit` names them in errors). Both parts must be non-empty; errors are
// InvalidArgument naming options.flag, `path` and --val-fraction.
absl::StatusOr<PartRange> SelectPart(const DataOptions& options, const std::string& path, int64_t total,
                                     const std::string& unit);

// " (first 900 of 1000 rows)" / " (last 100 of 1000 rows, held out by --val-fraction=0.1)" / "".
std::string PartDescription(const DataOptions& options, const PartRange& range, int64_t total, const std::string& unit);

// Checks that Examples(begin, count) lies in [0, num_examples); InvalidArgument otherwise.
absl::Status CheckExampleRange(int64_t begin, int64_t count, int64_t num_examples);

}  // namespace psync::data
