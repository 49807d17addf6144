#include "worker/data/token_dataset.h"

#include <algorithm>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "worker/data/batch_geometry.h"
#include "worker/data/data_part.h"

namespace psync::data {

TokenDataset::TokenDataset(TokenStream tokens, int64_t begin, int64_t count, int64_t block_size,
                           int64_t max_token_id, int64_t vocab_limit, std::string description)
    : tokens_(std::move(tokens)),
      begin_(begin),
      count_(count),
      block_size_(block_size),
      description_(std::move(description)) {
  info_.task = Task::kLanguageModel;
  info_.example_shape = {block_size_};
  info_.max_token_id = max_token_id;
  info_.num_outputs = tokens_.width() == 1 ? 256 : max_token_id >= 0 ? max_token_id + 1 : vocab_limit;
}

std::string TokenDataset::Describe() const {
  if (info_.max_token_id < 0) return absl::StrCat(description_, ", ids checked against V=", info_.num_outputs, " as read");
  return absl::StrCat(description_, ", max token id ", info_.max_token_id);
}

int64_t TokenDataset::SequenceStart(int64_t step, int64_t global_batch, int64_t slot) const {
  // ((s*B + k) * T) mod (N - T) in 128 bits: exact for any step.
  const absl::uint128 g =
      absl::uint128(static_cast<uint64_t>(step)) * static_cast<uint64_t>(global_batch) + static_cast<uint64_t>(slot);
  return static_cast<int64_t>(
      static_cast<uint64_t>((g * static_cast<uint64_t>(block_size_)) % static_cast<uint64_t>(count_ - block_size_)));
}

absl::StatusOr<Batch> TokenDataset::Windows(const std::vector<int64_t>& starts) const {
  const int64_t n = static_cast<int64_t>(starts.size());
  const int64_t t = block_size_;
  Batch b;
  b.inputs = Tensor::Empty({n, t}, kInt64);
  b.targets = Tensor::Empty({n, t}, kInt64);
  int64_t* x = b.inputs.data<int64_t>();
  int64_t* y = b.targets.data<int64_t>();
  std::vector<int64_t> window(static_cast<size_t>(t + 1));
  for (int64_t i = 0; i < n; ++i) {
    PSYNC_RETURN_IF_ERROR(tokens_.Read(begin_ + starts[i], t + 1, window.data()));
    std::copy(window.begin(), window.end() - 1, x + i * t);
    std::copy(window.begin() + 1, window.end(), y + i * t);
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

absl::StatusOr<std::unique_ptr<Dataset>> MakeTokenDataset(const DataOptions& o, TokenStream tokens) {
  const int64_t t = o.block_size;
  if (t < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--block-size is ", t, ", expected >= 1 for token data (", o.flag, " ", o.path, ")"));
  }
  const int64_t total = tokens.count();
  PSYNC_ASSIGN_OR_RETURN(PartRange range, SelectPart(o, o.path, total, "tokens"));
  if (range.count <= t) {
    const std::string field =
        o.part == DataPart::kWhole
            ? (tokens.lazy() ? "the shards' token count"
                             : tokens.width() == 2 ? "token count (header int32 2)" : "token count (file size)")
            : (o.part == DataPart::kHead ? "the training part's token count" : "the held-out part's token count");
    return absl::InvalidArgumentError(absl::StrCat(o.flag, " ", o.path, ": ", field, " is ", range.count,
                                                   ", expected more than the block size T = ", t,
                                                   " (--block-size): a sequence needs T + 1 tokens"));
  }
  // One pass for the largest id (the model checks it against its
  // vocabulary), unless shards check every id they read against
  // --vocab-size (a pass over every shard before training is what lazy
  // mapping avoids).
  const bool checked_per_shard = tokens.lazy() && o.vocab_size > 0;
  int64_t max_id = -1;
  if (!checked_per_shard) {
    PSYNC_ASSIGN_OR_RETURN(max_id, tokens.MaxId(range.begin, range.count));
  }
  const std::string shards =
      tokens.lazy() ? absl::StrCat(tokens.num_shards(), " shard", tokens.num_shards() == 1 ? "" : "s", ", ") : "";
  std::string description =
      absl::StrCat(o.name.empty() ? o.path : o.name, " (", tokens.kind(), ", ", shards, total, " tokens",
                   tokens.width() == 1 ? ", V=256" : "", ", T=", t, tokens.lazy() ? ", mmap on first use)" : ", mmap)",
                   PartDescription(o, range, total, "tokens"));
  return std::unique_ptr<Dataset>(new TokenDataset(std::move(tokens), range.begin, range.count, t, max_id,
                                                   o.vocab_size, std::move(description)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenTokens(const DataOptions& o) {
  if (o.path.empty()) return absl::InvalidArgumentError(absl::StrCat("--data-format=tokens needs ", o.flag, "=FILE"));
  if (IsShardSet(o.path)) {
    PSYNC_ASSIGN_OR_RETURN(std::vector<std::string> paths, ListShards(o.path, o.flag));
    PSYNC_ASSIGN_OR_RETURN(TokenStream shards, TokenStream::OpenShards(paths, o.flag, o.vocab_size));
    return MakeTokenDataset(o, std::move(shards));
  }
  PSYNC_ASSIGN_OR_RETURN(TokenFile file, OpenLlmcTokens(o.path, o.flag));
  return MakeTokenDataset(o, TokenStream(std::move(file)));
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenBytes(const DataOptions& o) {
  if (o.path.empty()) return absl::InvalidArgumentError(absl::StrCat("--data-format=bytes needs ", o.flag, "=FILE"));
  if (IsShardSet(o.path)) {
    return absl::InvalidArgumentError(absl::StrCat(o.flag, " ", o.path, ": a directory or glob of shards is read as llm.c ",
                                                   "token files (--data-format=tokens); --data-format=bytes takes one file"));
  }
  PSYNC_ASSIGN_OR_RETURN(TokenFile file, OpenByteTokens(o.path, o.flag));
  return MakeTokenDataset(o, TokenStream(std::move(file)));
}

}  // namespace psync::data
