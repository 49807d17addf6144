#include "worker/data/example_dataset.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "worker/data/batch_geometry.h"

namespace psync::data {

ExampleDataset::ExampleDataset(int64_t begin, int64_t count, bool shuffle, uint64_t seed, std::string description,
                               DataInfo info)
    : begin_(begin),
      count_(count),
      order_(count, shuffle, seed),
      description_(std::move(description)),
      info_(std::move(info)) {}

absl::StatusOr<Batch> ExampleDataset::Get(const BatchSpec& spec) const {
  PSYNC_RETURN_IF_ERROR(ValidateBatchSpec(spec));
  return Gather(order_.MicroBatch(spec));
}

absl::StatusOr<Batch> ExampleDataset::Examples(int64_t begin, int64_t count) const {
  PSYNC_RETURN_IF_ERROR(CheckExampleRange(begin, count, count_));
  std::vector<int64_t> examples(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) examples[static_cast<size_t>(i)] = begin + i;
  return Gather(examples);
}

std::string DescribeExamples(const DataOptions& o, const std::string& source, const std::string& what,
                             const PartRange& range, int64_t total, const std::string& unit) {
  return absl::StrCat(o.name.empty() ? source : o.name, " ", what, PartDescription(o, range, total, unit),
                      o.shuffle ? absl::StrCat(" shuffled (seed=", o.seed, ")") : "");
}

}  // namespace psync::data
