#include "psync/ddp/unused_parameter_source.h"

#include "absl/strings/str_cat.h"

namespace psync::ddp {

AllreduceUnusedParameterSource::AllreduceUnusedParameterSource(std::shared_ptr<comm::ProcessGroup> group,
                                                               Device device)
    : group_(std::move(group)), device_(device) {}

void AllreduceUnusedParameterSource::Submit(int64_t iteration, const std::vector<uint8_t>& local_used) {
  std::vector<float> values(local_used.begin(), local_used.end());
  Pending p;
  // Float counts are exact far beyond any world size.
  p.counts = Tensor::FromVector(values, {static_cast<int64_t>(values.size())}, device_);
  p.work = group_->AllreduceSum(p.counts, absl::StrCat("unused-parameter bitmap of iteration ", iteration));
  pending_[iteration] = std::move(p);
}

absl::StatusOr<std::vector<uint8_t>> AllreduceUnusedParameterSource::GlobalUsed(int64_t iteration,
                                                                               std::chrono::milliseconds timeout) {
  auto it = pending_.find(iteration);
  if (it == pending_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no used-parameter bitmap was submitted for iteration ", iteration));
  }
  Pending p = std::move(it->second);
  pending_.erase(pending_.begin(), std::next(it));  // this one and any older, abandoned ones
  absl::Status st = p.work->Wait(timeout);
  if (!st.ok()) return st;
  std::vector<float> counts = p.counts.ToVector();
  std::vector<uint8_t> used(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) used[i] = counts[i] > 0.5f ? 1 : 0;
  return used;
}

}  // namespace psync::ddp
