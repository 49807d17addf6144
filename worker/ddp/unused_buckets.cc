#include "worker/ddp/unused_buckets.h"

#include "absl/strings/str_cat.h"

namespace psync::ddp {

namespace {
class Skipped : public comm::Work {
 public:
  explicit Skipped(size_t bucket) : desc_(absl::StrCat("bucket ", bucket, " (skipped: unused on every rank)")) {}
  absl::Status Wait(std::chrono::milliseconds) override { return absl::OkStatus(); }
  bool IsCompleted() override { return true; }
  std::string Describe() const override { return desc_; }

 private:
  const std::string desc_;
};
}  // namespace

BucketFate DecideBucket(const Bucket& bucket, const std::vector<uint8_t>& local_used,
                        const std::optional<std::vector<uint8_t>>& global_used) {
  for (const BucketSlot& s : bucket.slots()) {
    if (local_used[s.param]) return BucketFate::kLaunch;
  }
  if (!global_used) return BucketFate::kWait;
  for (const BucketSlot& s : bucket.slots()) {
    if ((*global_used)[s.param]) return BucketFate::kLaunch;
  }
  return BucketFate::kSkip;
}

std::shared_ptr<comm::Work> SkippedBucketWork(size_t bucket) { return std::make_shared<Skipped>(bucket); }

}  // namespace psync::ddp
