// Datasets by --data-format, and Open(): the training set and the optional
// held-out set from DataOptions.
//
//   PSYNC_ASSIGN_OR_RETURN(data::OpenedData data, data::Open(options));
//   data.train->Get(spec); if (data.val) data.val->Examples(...);
//
// Formats: rows, synthetic, idx, tokens, bytes (data/README.md). "auto"
// (the default) is not an entry: Open resolves it with DetectFormat.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "psync/common/registry.h"
#include "worker/data/data_options.h"
#include "worker/data/dataset.h"

namespace psync::data {

const Registry<Dataset, DataOptions>& Datasets();

struct OpenedData {
  std::unique_ptr<Dataset> train;
  std::unique_ptr<Dataset> val;  // null without --val-data / --val-fraction (fashion-mnist: t10k)
  std::string format;            // the resolved --data-format
};

// Opens and validates everything before training:
// - format "auto" is resolved per file (format_detect.h); an explicit
//   format applies to --val-data too;
// - --data=fashion-mnist[:DIR] is idx train (28 x 28) and, without
//   --val-data/--val-fraction, t10k as the held-out set;
// - --val-fraction=F holds out the tail of --data (DataPart);
//   --val-data and --val-fraction together are an error;
// - the held-out set must fit the training set (same task, example shape and,
//   for regression/classification, output count); the error names both;
// - token data: the held-out set's largest id must be below the model's
//   vocabulary (options.vocab_size, else --data's largest id + 1); the
//   error names the held-out source, the id and V.
// The held-out set is never shuffled.
absl::StatusOr<OpenedData> Open(const DataOptions& options);

}  // namespace psync::data
