#include "worker/ddp/zero_buckets.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "psync/common/status_from_exception.h"
#include "psync/tensor/ops.h"

namespace psync::ddp {

int64_t ZeroPaddedCount(int64_t elements, int world) {
  const int64_t unit = kZeroShardAlign * static_cast<int64_t>(world < 1 ? 1 : world);
  return (elements + unit - 1) / unit * unit;
}

ZeroBuckets::ZeroBuckets(std::vector<autograd::Variable> params, std::shared_ptr<comm::ProcessGroup> group,
                         int stage, std::chrono::milliseconds timeout)
    : params_(std::move(params)), group_(std::move(group)), stage_(stage), timeout_(timeout) {
  used_.assign(params_.size(), 0);
  if (stage_ >= 3) {
    memory_ = std::make_unique<ZeroParameters>(group_, timeout_);
    memory_->SetAfterGather([this](size_t b) {
      // A gather issued after the last step's shards changed completed: every
      // rank entered it (ParametersWhole).
      parameters_whole_ = true;
      if (!after_gather_) return;
      std::vector<autograd::Variable> gathered;
      for (size_t i : plan_.buckets[b].params) gathered.push_back(params_[i]);
      after_gather_(gathered);
    });
  }
}

void ZeroBuckets::Install(const std::vector<Bucket>& buckets) {
  // The parameters' values move: the last gathers must have landed (stage
  // 3: every value gathered, from which the new shards are cut).
  if (absl::Status st = memory_ && memory_->installed() ? Summon() : WaitParameters(); !st.ok()) {
    throw std::runtime_error(st.ToString());
  }
  optim::ShardPlan plan;
  plan.world = group_->size();
  plan.rank = group_->rank();
  std::vector<Tensor> param_buffers;
  std::vector<Tensor> grad_shards;
  for (const Bucket& b : buckets) {
    optim::FlatBucket fb;
    int64_t elements = 0;
    const Tensor& first = params_[b.slots().front().param].data();
    for (const BucketSlot& s : b.slots()) {
      const Tensor& d = params_[s.param].data();
      if (d.dtype() != first.dtype()) {
        throw std::runtime_error(absl::StrCat("bucket ", b.index(), " mixes parameter dtypes (", DTypeName(d.dtype()),
                                              " and ", DTypeName(first.dtype()), "); --zero needs one per bucket"));
      }
      fb.params.push_back(s.param);
      fb.offsets.push_back(s.offset);
      elements = s.offset + d.numel();
    }
    fb.padded = ZeroPaddedCount(elements, plan.world);
    if (b.buffer().numel() < fb.padded) {
      throw std::runtime_error(absl::StrCat("bucket ", b.index(), ": gradient buffer of ", b.buffer().numel(),
                                            " elements, ZeRO needs ", fb.padded));
    }
    const int64_t s = fb.padded / plan.world;
    if (memory_) {
      // Stage 3: ZeroParameters keeps the values (below); the gradients as stage 2.
      grad_shards.push_back(Tensor::Zeros({s}, kFloat32, first.device()));
      plan.buckets.push_back(std::move(fb));
      continue;
    }
    // The parameters' values, flat in the bucket's layout; the group's
    // collective buffer so the all-gather runs in place (shm).
    absl::StatusOr<Tensor> buf = group_->NewCollectiveBuffer({fb.padded}, first.dtype(), first.device());
    if (!buf.ok()) {
      throw std::runtime_error(absl::StrCat("bucket ", b.index(), ": parameter buffer of ", fb.padded,
                                            " elements: ", buf.status().ToString()));
    }
    for (size_t k = 0; k < fb.params.size(); ++k) {
      const autograd::Variable& p = params_[fb.params[k]];
      Tensor view = buf->View(fb.offsets[k], p.data().shape());
      ops::Copy(view, p.data());
      // Why: the optimizer updates this rank's shard of the buffer in place
      // and the all-gather fills the rest, so the model reads the new values.
      p.mutable_data() = view;
    }
    grad_shards.push_back(stage_ >= 2 ? Tensor::Zeros({s}, kFloat32, first.device())
                                      : b.buffer().View(static_cast<int64_t>(plan.rank) * s, {s}));
    param_buffers.push_back(std::move(*buf));
    plan.buckets.push_back(std::move(fb));
  }
  if (memory_) {
    memory_->Install(params_, plan);
    if (schedule_) schedule_->SetLayout(plan);
  }
  plan_ = std::move(plan);
  param_buffers_ = std::move(param_buffers);
  grad_shards_ = std::move(grad_shards);
  reduced_.assign(buckets.size(), 0);
  ++version_;
}

std::vector<Bucket> ZeroBuckets::BuildBuckets(const std::vector<std::vector<size_t>>& plan, Tensor* staging) const {
  std::vector<int64_t> padded(plan.size(), 0);
  for (size_t b = 0; b < plan.size(); ++b) {
    for (size_t i : plan[b]) padded[b] += params_[i].data().numel();
    padded[b] = ZeroPaddedCount(padded[b], group_->size());
  }
  const Device device = params_.front().data().device();
  if (staging) {
    const int64_t largest = *std::max_element(padded.begin(), padded.end());
    absl::StatusOr<Tensor> buf = group_->NewCollectiveBuffer({largest}, kFloat32, device);
    if (!buf.ok()) {
      throw std::runtime_error(absl::StrCat("staging buffer of ", largest, " floats: ", buf.status().ToString()));
    }
    *staging = std::move(*buf);
  }
  std::vector<Bucket> buckets;
  for (size_t b = 0; b < plan.size(); ++b) {
    // No step tags in ZeRO's buckets: they travel in an allreduce of their own.
    buckets.push_back(staging ? Bucket::BuildOn(*staging, b, plan[b], params_, padded[b])
                              : Bucket::Build(b, plan[b], params_, group_.get(), /*tail_elements=*/0, padded[b]));
  }
  return buckets;
}

size_t ZeroBuckets::Finalized(const std::vector<uint8_t>* global_used, const std::vector<uint8_t>& skipped) {
  size_t unused = 0;
  used_.assign(params_.size(), 1);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (global_used && !(*global_used)[i]) {
      used_[i] = 0;
      ++unused;
    }
    params_[i].set_grad(Tensor());
  }
  reduced_.assign(skipped.size(), 1);
  for (size_t b = 0; b < skipped.size(); ++b) reduced_[b] = skipped[b] ? 0 : 1;
  return unused;
}

Tensor ZeroBuckets::GradShard(size_t b) const {
  if (b >= reduced_.size() || !reduced_[b]) return Tensor();
  return grad_shards_[b];
}

Tensor ZeroBuckets::OwnParamShard(size_t b) const {
  if (memory_) return memory_->shard(b);
  const int64_t s = plan_.shard(b);
  return param_buffers_[b].View(static_cast<int64_t>(plan_.rank) * s, {s});
}

void ZeroBuckets::GatherParameters(size_t b) {
  if (memory_) {
    // Stage 3: the next forward gathers what it needs, from the shards; the
    // first of its gathers to complete makes the parameters whole again.
    parameters_whole_ = false;
    return;
  }
  gathers_.push_back(group_->Allgather(param_buffers_[b], absl::StrCat("parameters of bucket ", b)));
}

absl::Status ZeroBuckets::WaitParameters() {
  if (gathers_.empty()) return absl::OkStatus();
  absl::Status first;
  for (const auto& w : gathers_) {
    absl::Status st = w->Wait(timeout_);
    if (!st.ok() && first.ok()) first = st;
  }
  gathers_.clear();
  parameters_whole_ = first.ok();
  if (first.ok() && after_gather_) {
    first = RunCatching("after gathering the parameters", [&] { after_gather_(params_); });
  }
  return first;
}

void ZeroBuckets::SetAfterGather(AfterGather fn) { after_gather_ = std::move(fn); }

std::shared_ptr<nn::ForwardHooks> ZeroBuckets::AttachModule(const nn::Module& root, ZeroScheduleOptions options) {
  if (!memory_) return nullptr;
  schedule_ = std::make_shared<ZeroSchedule>(*memory_, root, params_, options);
  if (memory_->installed()) schedule_->SetLayout(plan_);
  return schedule_;
}

absl::Status ZeroBuckets::BeginForward() { return memory_ ? ReleaseGathered() : WaitParameters(); }

absl::Status ZeroBuckets::ReleaseGathered() { return schedule_ ? schedule_->ReleaseAll() : memory_->ReleaseAll(); }

void ZeroBuckets::ParameterDone(size_t param) {
  if (schedule_) schedule_->ParameterDone(param);
}

absl::Status ZeroBuckets::BackwardDone() { return memory_ ? ReleaseGathered() : absl::OkStatus(); }

absl::Status ZeroBuckets::Summon() {
  if (!memory_) return WaitParameters();
  if (schedule_) return schedule_->Summon();
  return memory_->GatherAll();
}

int64_t ZeroBuckets::parameter_bytes() const {
  if (memory_) return memory_->shard_bytes() + memory_->window_bytes();
  int64_t bytes = 0;
  for (const Tensor& t : param_buffers_) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

int64_t ZeroBuckets::shard_bytes() const {
  if (stage_ < 2) return 0;
  int64_t bytes = 0;
  for (const Tensor& t : grad_shards_) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

}  // namespace psync::ddp
