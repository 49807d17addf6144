#include "worker/ddp/zero_parameters.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "psync/tensor/ops.h"

namespace psync::ddp {
namespace {

constexpr char kWhyNotGathered[] =
    "--zero=3 gathers a module's parameters only while its forward or backward runs. Call modules through "
    "Module::operator() (or open a ForwardScope on a module whose parameters are read otherwise), and call "
    "reducer().WaitForParameters() before reading the parameters outside a forward (evaluation, saving)";

// "bucket 3 (h.0.attn.c_attn.weight ... 4 parameters)": how errors name a bucket.
std::string BucketName(size_t b, const optim::FlatBucket& fb, const std::vector<autograd::Variable>& params) {
  std::string first = fb.params.empty() ? std::string("empty") : params[fb.params.front()].name();
  return absl::StrCat("bucket ", b, " (", first, fb.params.size() > 1 ? absl::StrCat(" and ", fb.params.size() - 1, " more") : "",
                      ")");
}

}  // namespace

ZeroParameters::~ZeroParameters() {
  for (const auto& w : gathers_) {
    if (w) (void)w->Wait(timeout_);
  }
}

void ZeroParameters::Install(const std::vector<autograd::Variable>& params, const optim::ShardPlan& plan) {
  std::vector<std::shared_ptr<Storage>> storages;
  std::vector<Tensor> views, shards;
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const optim::FlatBucket& fb = plan.buckets[b];
    const Tensor& first = params[fb.params.front()].data();
    const int64_t s = fb.padded / plan.world;
    // The bucket's values, flat (read from the parameters as they are now),
    // then only this rank's shard of them is kept.
    Tensor flat = Tensor::Zeros({fb.padded}, first.dtype(), first.device());
    for (size_t k = 0; k < fb.params.size(); ++k) {
      const Tensor& d = params[fb.params[k]].data();
      ops::Copy(flat.View(fb.offsets[k], d.shape()), d);
    }
    shards.push_back(flat.View(static_cast<int64_t>(plan.rank) * s, {s}).Clone());
    auto storage = Storage::Detached(static_cast<size_t>(fb.padded) * first.element_size(), first.device(),
                                     absl::StrCat("the parameters of ", BucketName(b, fb, params)), kWhyNotGathered);
    views.push_back(Tensor::FromStorage(storage, {fb.padded}, first.dtype()));
    storages.push_back(std::move(storage));
  }
  // The old layout's buffers go back only now: the values above were read from them.
  (void)ReleaseAll();
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const optim::FlatBucket& fb = plan.buckets[b];
    for (size_t k = 0; k < fb.params.size(); ++k) {
      const autograd::Variable& p = params[fb.params[k]];
      // Why: the parameter is now a view of memory that comes and goes; what
      // autograd saves of it reads the bucket's values again once gathered.
      p.mutable_data() = views[b].View(fb.offsets[k], p.data().shape());
    }
  }
  plan_ = plan;
  storages_ = std::move(storages);
  views_ = std::move(views);
  shards_ = std::move(shards);
  buffers_.assign(storages_.size(), Tensor());
  pooled_.assign(storages_.size(), 0);
  gathers_.assign(storages_.size(), nullptr);
  // Why a new pool: its buffers fit the old layout's buckets.
  free_.clear();
  pool_bytes_ = 0;
}

int64_t ZeroParameters::PoolKey(size_t b) const {
  // float32 elements, whatever the parameters' dtype: a buffer is bytes lent.
  return (static_cast<int64_t>(views_[b].nbytes()) + 3) / 4;
}

Tensor ZeroParameters::TakeBuffer(size_t b, bool pooled) {
  const int64_t elements = PoolKey(b);
  std::vector<Tensor>& free = free_[elements];
  if (pooled && !free.empty()) {
    Tensor buf = std::move(free.back());
    free.pop_back();
    return buf;
  }
  absl::StatusOr<Tensor> buf = group_->NewCollectiveBuffer({elements}, kFloat32, views_[b].device());
  if (!buf.ok()) {
    throw std::runtime_error(absl::StrCat("--zero=3: a buffer for the parameters of bucket ", b, " (", elements * 4,
                                          " bytes): ", buf.status().ToString()));
  }
  if (buf->storage_offset() != 0) {
    throw std::runtime_error("--zero=3: the process group's collective buffer does not start its storage");
  }
  if (pooled) {
    pool_bytes_ += elements * 4;
    peak_window_bytes_ = std::max(peak_window_bytes_, pool_bytes_);
  }
  return std::move(*buf);
}

void ZeroParameters::Gather(size_t b, bool pooled) {
  if (resident(b)) return;
  Tensor buf = TakeBuffer(b, pooled);
  storages_[b]->Bind(buf.storage());
  buffers_[b] = std::move(buf);
  pooled_[b] = pooled ? 1 : 0;
  const int64_t s = plan_.shard(b);
  // This rank's values in place; the all-gather brings the others'.
  ops::Copy(views_[b].View(static_cast<int64_t>(plan_.rank) * s, {s}), shards_[b]);
  gathers_[b] = group_->Allgather(views_[b], absl::StrCat("parameters of bucket ", b));
}

absl::Status ZeroParameters::Wait(size_t b) {
  if (!resident(b)) {
    return absl::FailedPreconditionError(absl::StrCat("--zero=3: bucket ", b, " is waited for but was not gathered"));
  }
  if (!gathers_[b]) return absl::OkStatus();
  absl::Status st = gathers_[b]->Wait(timeout_);
  gathers_[b].reset();
  if (st.ok() && after_gather_) {
    st = RunCatching(absl::StrCat("--zero=3: after gathering bucket ", b), [&] { after_gather_(b); });
  }
  return Annotate(st, absl::StrCat("--zero=3: gathering the parameters of bucket ", b, " (rank ", plan_.rank, ")"));
}

absl::Status ZeroParameters::Release(size_t b) {
  if (!resident(b)) return absl::OkStatus();
  absl::Status st;
  if (gathers_[b]) st = Wait(b);  // the communication thread may still write the buffer
  storages_[b]->Unbind();
  if (pooled_[b]) free_[PoolKey(b)].push_back(std::move(buffers_[b]));
  buffers_[b] = Tensor();
  pooled_[b] = 0;
  return st;
}

absl::Status ZeroParameters::ReleaseAll() {
  absl::Status first;
  for (size_t b = 0; b < buffers_.size(); ++b) {
    absl::Status st = Release(b);
    if (first.ok()) first = st;
  }
  return first;
}

absl::Status ZeroParameters::GatherAll() {
  PSYNC_RETURN_IF_ERROR(RunCatching("--zero=3: gathering every parameter", [&] {
    for (size_t b = 0; b < storages_.size(); ++b) Gather(b, /*pooled=*/false);
  }));
  absl::Status first;
  for (size_t b = 0; b < storages_.size(); ++b) {
    absl::Status st = Wait(b);
    if (first.ok()) first = st;
  }
  return first;
}

int64_t ZeroParameters::shard_bytes() const {
  int64_t bytes = 0;
  for (const Tensor& t : shards_) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}


}  // namespace psync::ddp
