// ExampleDataset: what the example datasets (rows, synthetic, idx) share.
// Each holds a part [begin, begin + count) of a table read once and shared by
// the training and held-out parts; which examples a step takes is
// example_order.h's, and a subclass only gathers given examples into a
// Batch (its tensors' shapes and its conversion).
//
// Threads: immutable after construction; Get/Examples may be called from any
// thread (ExampleOrder guards its own cache).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/data_options.h"
#include "worker/data/data_part.h"
#include "worker/data/dataset.h"
#include "worker/data/example_order.h"

namespace psync::data {

class ExampleDataset : public Dataset {
 public:
  std::string Describe() const override { return description_; }
  const DataInfo& info() const override { return info_; }
  int64_t num_examples() const override { return count_; }
  absl::StatusOr<Batch> Get(const BatchSpec& spec) const override;
  absl::StatusOr<Batch> Examples(int64_t begin, int64_t count) const override;

 protected:
  // Examples [begin, begin + count) of the table; `info` says what one is.
  ExampleDataset(int64_t begin, int64_t count, bool shuffle, uint64_t seed, std::string description, DataInfo info);

  // The batch of `examples` (indices relative to begin()), in that order.
  virtual Batch Gather(const std::vector<int64_t>& examples) const = 0;

  int64_t begin() const { return begin_; }

 private:
  const int64_t begin_, count_;
  ExampleOrder order_;
  std::string description_;
  DataInfo info_;
};

// The description of an example dataset: `name` (or, when unset, `source`)
// and `what` ("(N rows, ...)"), then its part and its shuffle, e.g.
// "x.safetensors (100 rows, in=2, out=1) (first 90 of 100 rows) shuffled (seed=1)".
std::string DescribeExamples(const DataOptions& options, const std::string& source, const std::string& what,
                             const PartRange& range, int64_t total, const std::string& unit);

}  // namespace psync::data
