#include "worker/data/token_dataset.h"

#include <algorithm>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/data/batch_geometry.h"
#include "worker/data/data_part.h"

namespace psync::data {

TokenDataset::TokenDataset(TokenFile file, int64_t begin, int64_t count, int64_t block_size, std::string description)
    : file_(std::move(file)),
      begin_(begin),
      count_(count),
      block_size_(block_size),
      description_(std::move(description)) {
  // One pass over the tokens for the largest id (the model checks it
  // against its vocabulary before training).
  int64_t max_id = 0;
  if (file_.width == 2) {
    const uint8_t* p = file_.tokens + begin_ * 2;
    uint32_t m = 0;
    for (int64_t i = 0; i < count_; ++i) m = std::max(m, uint32_t{p[2 * i]} | (uint32_t{p[2 * i + 1]} << 8));
    max_id = m;
  } else {
    const uint8_t* p = file_.tokens + begin_;
    max_id = count_ > 0 ? *std::max_element(p, p + count_) : 0;
  }
  info_.task = Task::kLanguageModel;
  info_.example_shape = {block_size_};
  info_.max_token_id = max_id;
  info_.num_outputs = file_.width == 1 ? 256 : max_id + 1;
}

std::string TokenDataset::Describe() const { return absl::StrCat(description_, ", max token id ", info_.max_token_id); }

int64_t TokenDataset::SequenceStart(int64_t step, int64_t global_batch, int64_t slot) const {
  // ((s*B + k) * T) mod (N - T) in 128 bits: exact for any step.
  const absl::uint128 g =
      absl::uint128(static_cast<uint64_t>(step)) * static_cast<uint64_t>(global_batch) + static_cast<uint64_t>(slot);
  return static_cast<int64_t>(
      static_cast<uint64_t>((g * static_cast<uint64_t>(block_size_)) % static_cast<uint64_t>(count_ - block_size_)));
}

Batch TokenDataset::Windows(const std::vector<int64_t>& starts) const {
  const int64_t n = static_cast<int64_t>(starts.size());
  const int64_t t = block_size_;
  Batch b;
  b.inputs = Tensor::Empty({n, t}, kInt64);
  b.targets = Tensor::Empty({n, t}, kInt64);
  int64_t* x = b.inputs.data<int64_t>();
  int64_t* y = b.targets.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t o = begin_ + starts[i];
    int64_t prev = file_.at(o);
    for (int64_t j = 0; j < t; ++j) {
      const int64_t next = file_.at(o + j + 1);
      x[i * t + j] = prev;
      y[i * t + j] = next;
      prev = next;
    }
  }
  return b;
}

absl::StatusOr<Batch> TokenDataset::Get(const BatchSpec& spec) const {
  PSYNC_RETURN_IF_ERROR(ValidateBatchSpec(spec));
  const int64_t n = MicroBatchSize(spec);
  const int64_t first = FirstSlot(spec);
  std::vector<int64_t> starts(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) starts[i] = SequenceStart(spec.step, spec.global_batch, first + i);
  return Windows(starts);
}

absl::StatusOr<Batch> TokenDataset::Examples(int64_t begin, int64_t count) const {
  PSYNC_RETURN_IF_ERROR(CheckExampleRange(begin, count, num_examples()));
  std::vector<int64_t> starts(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) starts[i] = (begin + i) * block_size_;
  return Windows(starts);
}

namespace {

absl::StatusOr<std::unique_ptr<Dataset>> MakeTokenDataset(const DataOptions& o, TokenFile file) {
  const int64_t t = o.block_size;
  if (t < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--block-size is ", t, ", expected >= 1 for token data (", o.flag, " ", o.path, ")"));
  }
  PSYNC_ASSIGN_OR_RETURN(PartRange range, SelectPart(o, o.path, file.count, "tokens"));
  if (range.count <= t) {
    const std::string field =
        o.part == DataPart::kWhole
            ? (file.width == 2 ? "token count (header int32 2)" : "token count (file size)")
            : (o.part == DataPart::kHead ? "the training part's token count" : "the held-out part's token count");
    return absl::InvalidArgumentError(absl::StrCat(o.flag, " ", o.path, ": ", field, " is ", range.count,
                                                   ", expected more than the block size T = ", t,
                                                   " (--block-size): a sequence needs T + 1 tokens"));
  }
  std::string description = absl::StrCat(o.name.empty() ? o.path : o.name, " (", file.kind, ", ", file.count, " tokens",
                                         file.width == 1 ? ", V=256" : "", ", T=", t, ", mmap)",
                                         PartDescription(o, range, file.count, "tokens"));
  return std::unique_ptr<Dataset>(
      new TokenDataset(std::move(file), range.begin, range.count, t, std::move(description)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenTokens(const DataOptions& o) {
  if (o.path.empty()) return absl::InvalidArgumentError(absl::StrCat("--data-format=tokens needs ", o.flag, "=FILE"));
  PSYNC_ASSIGN_OR_RETURN(TokenFile file, OpenLlmcTokens(o.path, o.flag));
  return MakeTokenDataset(o, std::move(file));
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenBytes(const DataOptions& o) {
  if (o.path.empty()) return absl::InvalidArgumentError(absl::StrCat("--data-format=bytes needs ", o.flag, "=FILE"));
  PSYNC_ASSIGN_OR_RETURN(TokenFile file, OpenByteTokens(o.path, o.flag));
  return MakeTokenDataset(o, std::move(file));
}

}  // namespace psync::data
