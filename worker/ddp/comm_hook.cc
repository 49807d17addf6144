#include "worker/ddp/comm_hook.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "worker/tensor/ops/pointwise.h"

namespace psync::ddp {

absl::Status ThenWork::Wait(std::chrono::milliseconds timeout) {
  absl::Status st = inner_->Wait(timeout);
  if (!st.ok()) return st;
  std::lock_guard<std::mutex> l(mu_);
  if (then_) {
    std::function<void()> fn = std::move(then_);
    then_ = nullptr;
    try {
      fn();
    } catch (const std::exception& e) {
      then_status_ = absl::InternalError(absl::StrCat(inner_->Describe(), ": after the collective: ", e.what()));
    }
  }
  return then_status_;
}

namespace {

class Allreduce : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  std::shared_ptr<comm::Work> Run(comm::ProcessGroup& group, const GradBucket& bucket) override {
    std::shared_ptr<comm::Work> w = group.AllreduceSum(bucket.buffer, absl::StrCat("bucket ", bucket.index));
    const int world = group.size();
    if (world == 1) return w;
    Tensor buffer = bucket.buffer;
    // Why divide after the sum (not before, like DDP's hook): the same
    // rounding as one process averaging, whatever the world size.
    return std::make_shared<ThenWork>(std::move(w), [buffer, world]() mutable {
      ops::ScaleInPlace(buffer, 1.0f / static_cast<float>(world));
    });
  }
};

}  // namespace

std::shared_ptr<CommHook> AllreduceHook() { return std::make_shared<Allreduce>(); }

}  // namespace psync::ddp
