#include "worker/comm/shm/shm_group.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "worker/comm/shm/collectives.h"
#include "worker/comm/shm/reduce_sum.h"
#include "worker/comm/util.h"

namespace psync::comm {

namespace {

constexpr std::chrono::milliseconds kStopBound{2000};
using Deadline = internal::SerialQueue::Clock::time_point;

// Runs `fn` with every wait of `ctx` also bounded by `deadline` (an op run
// inline by a Wait must end by that Wait's deadline).
template <typename Fn>
absl::Status Bounded(shm::ShmContext& ctx, Deadline deadline, Fn&& fn) {
  ctx.set_deadline(deadline);
  absl::Status st = fn();
  ctx.set_deadline(Deadline::max());
  return st;
}

// Whether the 1/size of an average is fused into the reduction: only for
// float32/float64 (and undefined tensors, which fail the same either way),
// where scaling the unrounded sum gives the same bits as scaling the stored
// sum (ProcessGroup's contract). A 16-bit sum is rounded before the default
// path scales it (by a 16-bit 1/size), so fusing would change its bits.
bool FusesAverage(const Tensor& tensor) {
  const DType t = tensor.defined() ? tensor.dtype() : kFloat32;
  return t == kFloat32 || t == kFloat64;
}

// shm::Allgather and AllgatherInPlace in the signature of the summing
// collectives (ShmGroup::FlatAlgorithms), the scale unused: an all-gather
// moves bytes.
absl::Status AllgatherNoScale(shm::ShmContext& ctx, const std::string& desc, const std::string& name, void* data,
                              size_t count, DType type, float /*scale*/) {
  return shm::Allgather(ctx, desc, name, data, count, type);
}
absl::Status AllgatherInPlaceNoScale(shm::ShmContext& ctx, const std::string& desc, const std::string& name,
                                     const std::vector<char*>& bases, uint64_t buffer_id, size_t offset_bytes,
                                     size_t count, DType type, float /*scale*/) {
  return shm::AllgatherInPlace(ctx, desc, name, bases, buffer_id, offset_bytes, count, type);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> ShmGroup::Create(std::shared_ptr<Store> store, int rank, int size,
                                                              shm::ShmOptions options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("ShmGroup::Create: bad rank ", rank, " of ", size));
  }
  std::vector<int> members;
  for (int r = 0; r < size; ++r) members.push_back(r);
  absl::StatusOr<std::shared_ptr<shm::ShmContext>> ctx =
      shm::ShmContext::Create(std::move(store), std::move(members), rank, std::move(options));
  if (!ctx.ok()) return ctx.status();
  return std::unique_ptr<ProcessGroup>(new ShmGroup(rank, size, std::move(*ctx)));
}

ShmGroup::ShmGroup(int rank, int size, std::shared_ptr<shm::ShmContext> ctx)
    : rank_(rank),
      size_(size),
      ctx_(std::move(ctx)),
      buffers_(std::make_shared<shm::BufferRegistry>()),
      staging_(std::make_shared<shm::CudaStaging>()) {
  std::weak_ptr<shm::ShmContext> weak = ctx_;
  queue_ = internal::SerialQueue::Start([weak](const absl::Status& reason) {
    // Why: the running collective may be waiting on a peer; the context's
    // abort flag makes it return, and peers see our abort word.
    if (auto c = weak.lock()) c->Abort(reason);
  });
}

ShmGroup::~ShmGroup() { queue_->Stop(kStopBound); }

std::string ShmGroup::Describe(const char* what, const std::string& name, const Tensor& t) const {
  return absl::StrCat(what, " '", name, "' (", internal::FormatBytes(t.defined() ? t.nbytes() : 0), ") on rank ",
                      rank_, " of ", size_, " (shm)");
}

std::shared_ptr<Work> ShmGroup::AllreduceSum(Tensor tensor, const std::string& name) {
  return Allreduce(std::move(tensor), name, "allreduce", 1.0f);
}

std::shared_ptr<Work> ShmGroup::AllreduceAverage(Tensor tensor, const std::string& name) {
  if (!FusesAverage(tensor)) return ProcessGroup::AllreduceAverage(std::move(tensor), name);
  return Allreduce(std::move(tensor), name, "allreduce (average)", 1.0f / static_cast<float>(size_));
}

std::shared_ptr<Work> ShmGroup::StagedCuda(Tensor tensor, const std::string& name, const std::string& desc,
                                           float scale, int root) {
  absl::StatusOr<std::shared_ptr<void>> ready = shm::CudaStaging::Ready(tensor);
  if (!ready.ok()) return internal::SerialQueue::Failed(desc, ready.status());
  std::shared_ptr<shm::ShmContext> ctx = ctx_;
  std::shared_ptr<shm::CudaStaging> staging = staging_;
  return queue_->Enqueue(
      desc,
      [ctx, staging, tensor, desc, name, scale, root, ready = *ready](Deadline deadline) {
        return Bounded(*ctx, deadline, [&]() -> absl::Status {
          absl::StatusOr<void*> host = staging->ToHost(tensor, ready);
          if (!host.ok()) return host.status();
          absl::Status st = root >= 0 ? shm::Broadcast(*ctx, desc, name, *host, tensor.nbytes(), root)
                                      : shm::Allreduce(*ctx, desc, name, *host, static_cast<size_t>(tensor.numel()),
                                                       tensor.dtype(), scale);
          if (!st.ok()) return st;
          return staging->ToDevice(tensor);
        });
      },
      /*inline_ok=*/true);
}

std::shared_ptr<Work> ShmGroup::Allreduce(Tensor tensor, const std::string& name, const char* what, float scale) {
  const std::string desc = Describe(what, name, tensor);
  if (!tensor.defined() || !tensor.is_contiguous() || !shm::Summable(tensor.dtype())) {
    return internal::SerialQueue::Failed(
        desc, absl::InvalidArgumentError(absl::StrCat(
                  desc, ": shm sums a contiguous float32/float64/bfloat16/float16 tensor, got ",
                  tensor.defined() ? tensor.DebugString() : std::string("an undefined tensor"))));
  }
  if (tensor.device().is_cuda()) return StagedCuda(std::move(tensor), name, desc, scale, /*root=*/-1);
  std::optional<shm::BufferRegistry::View> buf;
  // Small tensors take the one-step symmetric algorithm even in a buffer:
  // one synchronisation beats three when there is little to copy.
  if (tensor.nbytes() > ctx_->options().small_bytes) buf = buffers_->Find(tensor.storage()->data());
  return EnqueueFlat(std::move(tensor), desc, name, scale, std::move(buf), {&shm::AllreduceInPlace, &shm::Allreduce});
}

std::shared_ptr<Work> ShmGroup::ReduceScatterSum(Tensor tensor, const std::string& name) {
  return ReduceScatter(std::move(tensor), name, "reduce-scatter", 1.0f);
}

std::shared_ptr<Work> ShmGroup::ReduceScatterAverage(Tensor tensor, const std::string& name) {
  if (!FusesAverage(tensor)) return ProcessGroup::ReduceScatterAverage(std::move(tensor), name);
  return ReduceScatter(std::move(tensor), name, "reduce-scatter (average)", 1.0f / static_cast<float>(size_));
}

std::shared_ptr<Work> ShmGroup::ReduceScatter(Tensor tensor, const std::string& name, const char* what, float scale) {
  const std::string desc = Describe(what, name, tensor);
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous() || !shm::Summable(tensor.dtype())) {
    return internal::SerialQueue::Failed(
        desc, absl::InvalidArgumentError(absl::StrCat(
                  desc, ": shm reduce-scatters a contiguous float32/float64/bfloat16/float16 CPU tensor, got ",
                  tensor.defined() ? tensor.DebugString() : std::string("an undefined tensor"))));
  }
  std::optional<shm::BufferRegistry::View> buf = buffers_->Find(tensor.storage()->data());
  return EnqueueFlat(std::move(tensor), desc, name, scale, std::move(buf),
                     {&shm::ReduceScatterInPlace, &shm::ReduceScatter});
}

std::shared_ptr<Work> ShmGroup::Allgather(Tensor tensor, const std::string& name) {
  const std::string desc = Describe("all-gather", name, tensor);
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous()) {
    return internal::SerialQueue::Failed(
        desc, absl::InvalidArgumentError(absl::StrCat(desc, ": shm all-gathers a contiguous CPU tensor, got ",
                                                      tensor.defined() ? tensor.DebugString()
                                                                       : std::string("an undefined tensor"))));
  }
  std::optional<shm::BufferRegistry::View> buf = buffers_->Find(tensor.storage()->data());
  return EnqueueFlat(std::move(tensor), desc, name, /*scale=*/1.0f, std::move(buf),
                     {&AllgatherInPlaceNoScale, &AllgatherNoScale});
}

std::shared_ptr<Work> ShmGroup::EnqueueFlat(Tensor tensor, const std::string& desc, const std::string& name,
                                            float scale, std::optional<shm::BufferRegistry::View> buf,
                                            FlatAlgorithms algorithms) {
  std::shared_ptr<shm::ShmContext> ctx = ctx_;
  if (buf) {
    // Every rank's tensor is in shared memory: the collective reads the
    // peers' data where it is. (The tensor handle in the op keeps the
    // buffer, and the peers' mappings of it, alive until the collective is
    // over.)
    const size_t offset = static_cast<size_t>(tensor.storage_offset()) * tensor.element_size();
    return queue_->Enqueue(
        desc,
        [ctx, tensor, desc, name, view = std::move(*buf), offset, scale, in_place = algorithms.in_place](
            Deadline deadline) {
          return Bounded(*ctx, deadline, [&] {
            return in_place(*ctx, desc, name, view.bases, view.id, offset, static_cast<size_t>(tensor.numel()),
                            tensor.dtype(), scale);
          });
        },
        /*inline_ok=*/true);
  }
  return queue_->Enqueue(
      desc,
      [ctx, tensor, desc, name, scale, slots = algorithms.slots](Deadline deadline) {
        return Bounded(*ctx, deadline, [&] {
          return slots(*ctx, desc, name, tensor.raw_data(), static_cast<size_t>(tensor.numel()), tensor.dtype(),
                       scale);
        });
      },
      /*inline_ok=*/true);
}

std::shared_ptr<Work> ShmGroup::Broadcast(Tensor tensor, int root, const std::string& name) {
  const std::string desc = absl::StrCat(Describe("broadcast", name, tensor), " from root ", root);
  if (!tensor.defined() || !tensor.is_contiguous()) {
    return internal::SerialQueue::Failed(
        desc, absl::InvalidArgumentError(absl::StrCat(desc, ": shm needs a defined, contiguous tensor")));
  }
  if (root < 0 || root >= size_) {
    return internal::SerialQueue::Failed(desc, absl::InvalidArgumentError(absl::StrCat(desc, ": root out of range")));
  }
  if (tensor.device().is_cuda()) return StagedCuda(std::move(tensor), name, desc, 1.0f, root);
  std::shared_ptr<shm::ShmContext> ctx = ctx_;
  return queue_->Enqueue(
      desc,
      [ctx, tensor, desc, name, root](Deadline deadline) {
        return Bounded(*ctx, deadline,
                       [&] { return shm::Broadcast(*ctx, desc, name, tensor.raw_data(), tensor.nbytes(), root); });
      },
      /*inline_ok=*/true);
}

absl::StatusOr<std::vector<std::string>> ShmGroup::AllgatherBytes(const std::string& bytes,
                                                                  std::chrono::milliseconds timeout) {
  const std::string desc =
      absl::StrCat("allgather (", internal::FormatBytes(bytes.size()), ") on rank ", rank_, " of ", size_, " (shm)");
  auto result = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<shm::ShmContext> ctx = ctx_;
  auto work = queue_->Enqueue(
      desc,
      [ctx, desc, bytes, result](Deadline deadline) {
        return Bounded(*ctx, deadline, [&]() -> absl::Status {
          absl::StatusOr<std::vector<std::string>> all = shm::AllgatherBytes(*ctx, desc, bytes);
          if (!all.ok()) return all.status();
          *result = std::move(*all);
          return absl::OkStatus();
        });
      },
      /*inline_ok=*/true);
  absl::Status st = work->Wait(timeout);
  if (!st.ok()) return st;
  return *result;
}

absl::Status ShmGroup::Barrier(std::chrono::milliseconds timeout) {
  const std::string desc = absl::StrCat("barrier on rank ", rank_, " of ", size_, " (shm)");
  std::shared_ptr<shm::ShmContext> ctx = ctx_;
  return queue_
      ->Enqueue(
          desc,
          [ctx, desc](Deadline deadline) { return Bounded(*ctx, deadline, [&] { return shm::Barrier(*ctx, desc); }); },
          /*inline_ok=*/true)
      ->Wait(timeout);
}

absl::StatusOr<Tensor> ShmGroup::NewCollectiveBuffer(const Shape& shape, DType dtype, Device device) {
  if (!device.is_cpu() || size_ == 1) return ProcessGroup::NewCollectiveBuffer(shape, dtype, device);
  const size_t bytes = static_cast<size_t>(NumelOf(shape)) * ElementSize(dtype);
  const std::string desc = absl::StrCat("collective buffer ", ShapeToString(shape), " ", DTypeName(dtype), " (",
                                        internal::FormatBytes(bytes), ") on rank ", rank_, " of ", size_, " (shm)");
  auto base = std::make_shared<void*>(nullptr);
  std::shared_ptr<shm::ShmContext> ctx = ctx_;
  std::shared_ptr<shm::BufferRegistry> buffers = buffers_;
  absl::Status st = queue_
                        ->Enqueue(
                            desc,
                            [ctx, buffers, desc, bytes, base](Deadline deadline) {
                              return Bounded(*ctx, deadline, [&]() -> absl::Status {
                                absl::StatusOr<void*> p = buffers->Register(*ctx, desc, bytes);
                                if (!p.ok()) return p.status();
                                *base = *p;
                                return absl::OkStatus();
                              });
                            },
                            /*inline_ok=*/true)
                        ->Wait(ctx_->options().timeout);
  if (!st.ok()) return st;
  void* data = *base;
  std::shared_ptr<Storage> storage =
      Storage::Wrap(data, bytes, Device::CPU(), [buffers, data] { buffers->Release(data); });
  return Tensor::FromStorage(std::move(storage), shape, dtype);
}

void ShmGroup::Abort(const absl::Status& reason) {
  queue_->Poison(reason.ok() ? absl::AbortedError(absl::StrCat("process group aborted on rank ", rank_)) : reason);
}

}  // namespace psync::comm
