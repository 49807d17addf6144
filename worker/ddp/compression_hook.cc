#include "worker/ddp/compression_hook.h"

#include "absl/strings/str_cat.h"
#include "worker/comm/then_work.h"
#include "psync/tensor/ops/copy.h"
#include "psync/tensor/ops/pointwise.h"

namespace psync::ddp {
namespace {

class Compression : public CommHook {
 public:
  explicit Compression(DType wire) : wire_(wire) {}
  std::string name() const override { return absl::StrCat(DTypeName(wire_), " compression"); }

  std::shared_ptr<comm::Work> Run(comm::ProcessGroup& group, const GradBucket& bucket) override {
    const Tensor buffer = bucket.buffer;
    const int world = group.size();
    // Why divide before the cast: a float16 sum of W gradients can overflow
    // where their mean does not (DDP's hooks do the same).
    if (world > 1) ops::ScaleInPlace(buffer, 1.0f / static_cast<float>(world));
    const Tensor wire = buffer.To(wire_);
    std::shared_ptr<comm::Work> w =
        group.AllreduceSum(wire, absl::StrCat("bucket ", bucket.index, " (", DTypeName(wire_), ")"));
    return std::make_shared<comm::ThenWork>(std::move(w), [buffer, wire] { ops::Copy(buffer, wire); });
  }

 private:
  const DType wire_;
};

}  // namespace

std::shared_ptr<CommHook> CompressionHook(DType wire) { return std::make_shared<Compression>(wire); }

absl::StatusOr<std::shared_ptr<CommHook>> CommHookFromFlag(const std::string& value) {
  if (value == "none" || value.empty()) return std::shared_ptr<CommHook>();
  if (value == "bf16") return CompressionHook(kBFloat16);
  if (value == "fp16") return CompressionHook(kFloat16);
  return absl::InvalidArgumentError(absl::StrCat("--grad-compression: '", value, "' is not one of none|bf16|fp16"));
}

}  // namespace psync::ddp
