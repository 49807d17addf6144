#include "psync/ddp/comm_hook.h"

#include "absl/strings/str_cat.h"

namespace psync::ddp {

namespace {

class Allreduce : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  bool CarriesStepTag() const override { return true; }
  std::shared_ptr<comm::Work> Run(comm::ProcessGroup& group, const GradBucket& bucket) override {
    // Why divide after the sum (not before, like DDP's hook): the same
    // rounding as one process averaging, whatever the world size.
    return group.AllreduceAverage(bucket.buffer, absl::StrCat("bucket ", bucket.index));
  }
};

class ReduceScatter : public CommHook {
 public:
  std::string name() const override { return "reduce-scatter"; }
  std::shared_ptr<comm::Work> Run(comm::ProcessGroup& group, const GradBucket& bucket) override {
    // The same sum-then-divide as Allreduce, so the shard gets its bits.
    return group.ReduceScatterAverage(bucket.buffer, absl::StrCat("bucket ", bucket.index));
  }
};

}  // namespace

std::shared_ptr<CommHook> AllreduceHook() { return std::make_shared<Allreduce>(); }
std::shared_ptr<CommHook> ReduceScatterHook() { return std::make_shared<ReduceScatter>(); }

}  // namespace psync::ddp
