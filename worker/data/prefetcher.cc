#include "worker/data/prefetcher.h"

#include "absl/strings/str_cat.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"

namespace psync::data {

Prefetcher::Prefetcher(const Dataset& data, Options options) : data_(data), opt_(options), thread_([this] { Run(); }) {}

Prefetcher::~Prefetcher() { Stop(); }

void Prefetcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<StepBatches> Prefetcher::Prepare(int64_t step) const {
  StepBatches out;
  out.step = step;
  out.micro.reserve(static_cast<size_t>(opt_.accumulate));
  for (int64_t m = 0; m < opt_.accumulate; ++m) {
    BatchSpec spec;
    spec.step = step;
    spec.rank = opt_.rank;
    spec.world_size = opt_.world_size;
    spec.micro = m;
    spec.accumulate = opt_.accumulate;
    spec.global_batch = opt_.global_batch;
    absl::StatusOr<Batch> b;
    // Tensor allocation and the like throw: not user input, but never lost.
    if (absl::Status thrown = RunCatching("", [&] { b = data_.Get(spec); }); !thrown.ok()) b = thrown;
    if (!b.ok()) return Annotate(b.status(), absl::StrCat("data for step ", step, " micro-batch ", m));
    out.micro.push_back(*std::move(b));
  }
  return out;
}

void Prefetcher::Run() {
  for (int64_t step = opt_.first_step; opt_.end_step < 0 || step < opt_.end_step; ++step) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !slot_.has_value(); });
      if (stop_) return;
    }
    absl::StatusOr<StepBatches> prepared = Prepare(step);  // outside the lock: the trainer runs meanwhile
    const bool failed = !prepared.ok();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      slot_ = std::move(prepared);
      if (failed) done_ = true;
    }
    cv_.notify_all();
    if (failed) return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

absl::StatusOr<StepBatches> Prefetcher::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stop_ || slot_.has_value() || done_ || !error_.ok(); });
  if (!error_.ok()) return error_;
  if (stop_) return absl::CancelledError("prefetcher: stopped");
  if (slot_.has_value()) {
    absl::StatusOr<StepBatches> out = std::move(*slot_);
    slot_.reset();
    if (!out.ok()) error_ = out.status();
    lock.unlock();
    cv_.notify_all();
    return out;
  }
  return absl::OutOfRangeError(
      absl::StrCat("prefetcher: no step after ", opt_.end_step - 1, " (end_step ", opt_.end_step, ")"));
}

}  // namespace psync::data
