#include "worker/comm/nccl/nccl_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "psync/common/logging.h"
#include "psync/common/status_macros.h"
#include "worker/comm/flat_shard.h"
#include "worker/comm/prefix_store.h"
#include "worker/comm/util.h"

#if defined(PSYNC_WITH_CUDA) && __has_include("worker/tensor/cuda/cuda_context.h")
#include "worker/tensor/cuda/cuda_context.h"
#define PSYNC_COMM_HAVE_COMPUTE_STREAM 1
#endif

namespace psync::comm {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Makes `device` current through worker/tensor's per-thread cache of the
// current device (so its ops, which skip cudaGetDevice, see the truth).
void SetGroupDevice(int device) {
#if defined(PSYNC_COMM_HAVE_COMPUTE_STREAM)
  psync::cuda::SetDevice(device);
#else
  cudaSetDevice(device);
#endif
}
void ForgetCachedDevice() {
#if defined(PSYNC_COMM_HAVE_COMPUTE_STREAM)
  psync::cuda::ForgetCurrentDevice();
#endif
}

// The compute stream of `device` (owned by worker/tensor); may throw
// psync::TensorError.
cudaStream_t LookupComputeStream(int device) {
#if defined(PSYNC_COMM_HAVE_COMPUTE_STREAM)
  return psync::cuda::ComputeStream(device);
#else
  (void)device;
  return cudaStreamLegacy;  // fallback when tensor has no CUDA context: the legacy default stream
#endif
}

std::string CudaErr(cudaError_t e) { return absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e)); }
std::string NcclErr(ncclResult_t r, ncclComm_t comm) {
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  return absl::StrCat(ncclGetErrorString(r), (last && *last) ? absl::StrCat(" (", last, ")") : std::string());
}

// Every NCCL/CUDA call below first makes the group's device current with
// SetGroupDevice (cudaSetDevice through worker/tensor's per-thread cache of
// the current device) and deliberately does not switch back: restoring a
// thread's default device 0 would (CUDA >= 12) create a primary context on
// GPU 0 in a rank that runs on cuda:LOCAL_RANK, and psync's own ops never
// rely on the current device (they all use explicit device guards).
// cudaEventQuery / cudaStreamQuery, with a "not ready" answer cleared from
// the thread's last-error slot. The runtime may record cudaErrorNotReady
// there (PyTorch clears it for the same reason); left behind, the next
// kernel launch on this thread (worker/tensor checks cudaGetLastError()
// after every launch; IsCompleted is polled on the backward thread between
// launches) would throw an unrelated "cudaErrorNotReady".
cudaError_t QueryEvent(cudaEvent_t e) {
  const cudaError_t q = cudaEventQuery(e);
  if (q == cudaErrorNotReady) cudaGetLastError();
  return q;
}
cudaError_t QueryStream(cudaStream_t s) {
  const cudaError_t q = cudaStreamQuery(s);
  if (q == cudaErrorNotReady) cudaGetLastError();
  return q;
}

void Backoff(std::chrono::microseconds* d) {
  std::this_thread::sleep_for(*d);
  *d = std::min(*d * 2, std::chrono::microseconds(1000));
}

}  // namespace

// ---------------------------------------------------------------- state
struct NcclGroup::State {
  // Immutable after Create().
  int rank = 0;
  int size = 0;
  int device = 0;
  Millis timeout{30000};
  std::shared_ptr<Store> store;     // scoped with the prefix; used by AllgatherBytes
  cudaStream_t comm_stream = nullptr;     // owned: NCCL kernels only
  cudaStream_t compute_stream = nullptr;  // not owned: worker/tensor's stream of `device`

  // Guarded by mu: the communicator and every NCCL call on it.
  mutable std::mutex mu;
  ncclComm_t comm = nullptr;  // null after abort/destroy
  absl::Status poison;        // first failure; OK while healthy
  uint64_t allgather_seq = 0;

  // Caller holds mu. Aborts the communicator once and records the reason.
  void PoisonLocked(const absl::Status& reason) {
    if (poison.ok()) poison = reason;
    if (comm) {
      SetGroupDevice(device);
      ncclCommAbort(comm);
      comm = nullptr;
    }
  }

  // Caller holds mu. Waits until a non-blocking NCCL call leaves ncclInProgress.
  ncclResult_t SettleLocked(ncclResult_t r, Clock::time_point deadline) {
    std::chrono::microseconds d(20);
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) return ncclInProgress;
      Backoff(&d);
      ncclCommGetAsyncError(comm, &r);
    }
    return r;
  }
};

// ---------------------------------------------------------------- work
class NcclWork : public Work {
 public:
  NcclWork(std::string desc, std::shared_ptr<NcclGroup::State> group, Tensor tensor, cudaEvent_t done,
           absl::Status initial, Tensor scratch = Tensor())
      : desc_(std::move(desc)),
        group_(std::move(group)),
        tensor_(std::move(tensor)),
        scratch_(std::move(scratch)),
        done_event_(done) {
    if (!initial.ok()) {
      finished_ = true;
      status_ = initial;
    }
  }
  ~NcclWork() override {
    if (done_event_) {
      SetGroupDevice(group_->device);
      // Keep stream-ordered frees of tensor_ behind the collective.
      cudaStreamWaitEvent(group_->compute_stream, done_event_, 0);
      cudaEventDestroy(done_event_);
    }
  }

  std::string Describe() const override { return desc_; }

  bool IsCompleted() override {
    {
      // Never blocks behind a Wait that is polling (it holds mu_).
      std::unique_lock<std::mutex> l(mu_, std::try_to_lock);
      if (l.owns_lock() && finished_) return true;
    }
    if (!done_event_) return true;
    {
      std::lock_guard<std::mutex> g(group_->mu);
      if (!group_->poison.ok()) return true;  // Wait returns the failure at once
    }
    SetGroupDevice(group_->device);
    return QueryEvent(done_event_) != cudaErrorNotReady;
  }

  absl::Status Wait(Millis timeout) override {
    std::lock_guard<std::mutex> l(mu_);  // one waiter polls at a time
    if (finished_) return status_;
    const auto deadline = Clock::now() + timeout;
    std::chrono::microseconds d(20);
    SetGroupDevice(group_->device);
    while (true) {
      cudaError_t q = QueryEvent(done_event_);
      {
        std::lock_guard<std::mutex> g(group_->mu);
        // Poison is checked BEFORE trusting the event: ncclCommAbort (a
        // timeout elsewhere, or Abort from another thread) makes the
        // in-flight NCCL kernels exit early, after which the completion
        // event fires although the buffer holds a partial result. Such a
        // collective must fail with the group's reason, never succeed.
        if (!group_->poison.ok()) {
          return Finish(absl::Status(group_->poison.code(), absl::StrCat(desc_, " not completed: process group failed: ",
                                                                         std::string(group_->poison.message()))));
        }
        if (q == cudaSuccess) {
          // Later kernels on the compute stream (and the stream-ordered free
          // of the tensor) run after the collective; no host block.
          cudaStreamWaitEvent(group_->compute_stream, done_event_, 0);
          return Finish(absl::OkStatus());
        }
        absl::Status err;
        if (q != cudaErrorNotReady) {
          err = absl::InternalError(absl::StrCat(desc_, " failed: CUDA error ", CudaErr(q)));
        } else {
          ncclResult_t r = ncclSuccess;
          if (group_->comm) ncclCommGetAsyncError(group_->comm, &r);
          if (r != ncclSuccess && r != ncclInProgress) {
            err = absl::UnavailableError(absl::StrCat(desc_, " failed: NCCL error ", NcclErr(r, group_->comm),
                                                      " (did a peer die?)"));
          } else if (Clock::now() >= deadline) {
            err = absl::DeadlineExceededError(
                absl::StrCat(desc_, " timed out after ", internal::FormatDuration(timeout)));
          }
        }
        if (!err.ok()) {
          group_->PoisonLocked(err);
          return Finish(err);
        }
      }
      Backoff(&d);
    }
  }

 private:
  absl::Status Finish(absl::Status st) {  // caller holds mu_
    finished_ = true;
    status_ = std::move(st);
    return status_;
  }

  // Immutable after construction.
  const std::string desc_;
  const std::shared_ptr<NcclGroup::State> group_;
  const Tensor tensor_;   // keeps the memory alive while the collective may run
  const Tensor scratch_;  // the padded copy of an uneven reduce-scatter / all-gather (else undefined)
  const cudaEvent_t done_event_;  // recorded on the comm stream after the collective; null when never issued
  // Guarded by mu_.
  std::mutex mu_;
  bool finished_ = false;
  absl::Status status_;
};

// ---------------------------------------------------------------- group
namespace {

// The device of `rank`: `requested` (>= 0), else rank % the visible count.
absl::StatusOr<int> ChooseDevice(int rank, int requested) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device: ", e != cudaSuccess ? CudaErr(e) : std::string("cudaGetDeviceCount returned 0"),
        " (nccl backend needs a GPU; use backend \"gloo\" for CPU)"));
  }
  const int device = requested >= 0 ? requested : rank % count;
  if (device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: cuda:", device, " requested but only ", count, " visible"));
  }
  return device;
}

// Rank 0 makes the communicator's unique id and publishes it in `store`;
// the others wait up to `timeout` for it.
absl::StatusOr<ncclUniqueId> ExchangeUniqueId(Store& store, int rank, Millis timeout, const std::string& where) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  const std::string key = "nccl_unique_id";
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return absl::UnavailableError(absl::StrCat(where, ": ncclGetUniqueId: ", NcclErr(r, nullptr)));
    absl::Status st = store.Set(key, std::string(id.internal, sizeof(id.internal)));
    if (!st.ok()) return Annotate(st, where);
  } else {
    absl::StatusOr<std::string> v = store.Get(key, timeout);
    if (!v.ok()) return Annotate(v.status(), absl::StrCat(where, ": waiting for rank 0's unique id"));
    if (v->size() != sizeof(id.internal)) {
      return absl::InternalError(absl::StrCat(where, ": bad unique id of ", v->size(), " bytes in the store"));
    }
    std::memcpy(id.internal, v->data(), sizeof(id.internal));
  }
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> NcclGroup::Create(std::shared_ptr<Store> store, int rank, int size,
                                                                NcclOptions options) {
  if (!store) return absl::InvalidArgumentError("NcclGroup::Create: store is null");
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NcclGroup::Create: bad rank ", rank, " of ", size));
  }
  PSYNC_ASSIGN_OR_RETURN(const int device, ChooseDevice(rank, options.device));
  cudaError_t e = cudaSuccess;
  const std::string where = absl::StrCat("nccl init of rank ", rank, " of ", size, " on cuda:", device);
  if ((e = cudaSetDevice(device)) != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": cudaSetDevice: ", CudaErr(e)));
  }
  ForgetCachedDevice();  // set above without worker/tensor's cache

  auto state = std::make_shared<State>();
  try {
    state->compute_stream = LookupComputeStream(device);
  } catch (const std::exception& ex) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": no compute stream: ", ex.what()));
  }
  state->rank = rank;
  state->size = size;
  state->device = device;
  state->timeout = options.timeout;
  state->store = options.prefix.empty() ? store : std::make_shared<PrefixStore>(options.prefix, store);

  PSYNC_ASSIGN_OR_RETURN(const ncclUniqueId id, ExchangeUniqueId(*state->store, rank, options.timeout, where));

  // Non-blocking init, polled with the timeout.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const auto deadline = Clock::now() + options.timeout;
  {
    std::lock_guard<std::mutex> l(state->mu);
    ncclResult_t r = ncclCommInitRankConfig(&state->comm, size, id, rank, &config);
    if (r == ncclInProgress || r == ncclSuccess) r = state->SettleLocked(ncclInProgress, deadline);
    if (r != ncclSuccess) {
      absl::Status st = r == ncclInProgress
                            ? absl::DeadlineExceededError(absl::StrCat(where, " timed out after ",
                                                                       internal::FormatDuration(options.timeout),
                                                                       " (did every rank start?)"))
                            : absl::UnavailableError(absl::StrCat(where, " failed: ", NcclErr(r, state->comm)));
      if (state->comm) ncclCommAbort(state->comm);
      state->comm = nullptr;
      return st;
    }
  }
  if ((e = cudaStreamCreateWithFlags(&state->comm_stream, cudaStreamNonBlocking)) != cudaSuccess) {
    std::lock_guard<std::mutex> l(state->mu);
    state->PoisonLocked(absl::InternalError(where));
    return absl::InternalError(absl::StrCat(where, ": ", CudaErr(e)));
  }
  return std::unique_ptr<ProcessGroup>(new NcclGroup(rank, size, device, std::move(state)));
}

NcclGroup::NcclGroup(int rank, int size, int device, std::shared_ptr<State> state)
    : rank_(rank), size_(size), device_(device), state_(std::move(state)) {}

NcclGroup::~NcclGroup() {
  // Works hold a shared_ptr to State; the communicator goes away here: a
  // clean finalize when the comm stream drained within the timeout, else abort.
  std::lock_guard<std::mutex> l(state_->mu);
  SetGroupDevice(state_->device);
  if (state_->comm) {
    const auto deadline = Clock::now() + state_->timeout;
    std::chrono::microseconds d(20);
    while (QueryStream(state_->comm_stream) == cudaErrorNotReady && Clock::now() < deadline) Backoff(&d);
    bool clean = QueryStream(state_->comm_stream) == cudaSuccess;
    if (clean) {
      ncclResult_t r = ncclCommFinalize(state_->comm);
      r = state_->SettleLocked(r, deadline);
      clean = (r == ncclSuccess);
    }
    if (clean) {
      ncclCommDestroy(state_->comm);
    } else {
      ncclCommAbort(state_->comm);
    }
    state_->comm = nullptr;
    if (state_->poison.ok()) state_->poison = absl::AbortedError("process group destroyed");
  }
  // The comm stream is destroyed here; pending works only query their events.
  if (state_->comm_stream) cudaStreamDestroy(state_->comm_stream);
  state_->comm_stream = nullptr;
}

absl::Status NcclGroup::health() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->poison;
}

namespace {

enum class Kind { kAllreduce, kBroadcast, kReduceScatter, kAllgather };

ncclDataType_t NcclType(DType t) {
  return t == kBFloat16 ? ncclBfloat16 : t == kFloat16 ? ncclHalf : ncclFloat;
}

// Reduce-scatter / all-gather of a flat buffer (comm/flat_shard.h): NCCL
// wants equal shards, in place at rank * shard. A buffer whose length is
// not PaddedCount goes through a zero-padded scratch copy (made on the
// compute stream before the collective; its result copied back on the comm
// stream after it); the reducer pads its buffers, so it never pays that.
ncclResult_t IssueFlat(NcclGroup::State* s, Kind kind, const Tensor& tensor, Tensor* scratch, cudaError_t* cuda) {
  const size_t n = static_cast<size_t>(tensor.numel()), es = tensor.element_size();
  const size_t shard = ShardSize(n, s->size, es), padded = shard * static_cast<size_t>(s->size);
  char* p = static_cast<char*>(tensor.raw_data());
  const ShardRange own = ShardOf(n, s->size, s->rank, es);
  char* buf = p;
  if (padded != n) {
    *scratch = Tensor::Zeros({static_cast<int64_t>(padded)}, tensor.dtype(), tensor.device());
    buf = static_cast<char*>(scratch->raw_data());
    // On the compute stream: ordered before the ready event the comm stream waits on (recorded after this returns).
    const size_t in_bytes = kind == Kind::kReduceScatter ? n * es : own.size() * es;
    const size_t in_offset = kind == Kind::kReduceScatter ? 0 : own.begin * es;
    if (in_bytes > 0 &&
        (*cuda = cudaMemcpyAsync(buf + in_offset, p + in_offset, in_bytes, cudaMemcpyDeviceToDevice,
                                 s->compute_stream)) != cudaSuccess) {
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}

// What Issue takes: a contiguous tensor on the group's device, summable
// for a sum, and a root in range for a broadcast.
absl::Status CheckIssue(const NcclGroup::State& s, Kind kind, const Tensor& tensor, int root,
                        const std::string& desc) {
  if (!tensor.defined() || !tensor.device().is_cuda() || tensor.device().index != s.device) {
    return absl::InvalidArgumentError(
        absl::StrCat(desc, ": nccl needs a tensor on cuda:", s.device, ", got ",
                     tensor.defined() ? tensor.device().ToString() : std::string("an undefined tensor")));
  }
  const bool summable = tensor.dtype() == kFloat32 || tensor.dtype() == kBFloat16 || tensor.dtype() == kFloat16;
  const bool sums = kind == Kind::kAllreduce || kind == Kind::kReduceScatter;
  if (!tensor.is_contiguous() || (sums && !summable)) {
    return absl::InvalidArgumentError(absl::StrCat(
        desc, ": nccl needs a contiguous tensor (float32/bfloat16/float16 for a sum), got ", tensor.DebugString()));
  }
  if (kind == Kind::kBroadcast && (root < 0 || root >= s.size)) {
    return absl::InvalidArgumentError(absl::StrCat(desc, ": root out of range"));
  }
  return absl::OkStatus();
}

// Caller holds s->mu; the comm stream already waits on the compute stream.
// Enqueues the collective on a non-empty tensor (a flat one on `scratch`
// when that is defined) and settles the non-blocking call. Allreduce and
// reduce-scatter sum float32 / bfloat16 / float16; a broadcast and an
// all-gather move bytes (any dtype).
ncclResult_t LaunchCollective(NcclGroup::State* s, Kind kind, const Tensor& tensor, const Tensor& scratch, int root) {
  void* p = tensor.raw_data();
  const ncclDataType_t type = NcclType(tensor.dtype());
  const size_t n = static_cast<size_t>(tensor.numel()), es = tensor.element_size();
  const size_t shard = ShardSize(n, s->size, es);
  char* buf = scratch.defined() ? static_cast<char*>(scratch.raw_data()) : static_cast<char*>(p);
  char* own = buf + static_cast<size_t>(s->rank) * shard * es;
  ncclResult_t r = ncclSuccess;
  switch (kind) {
    case Kind::kAllreduce: r = ncclAllReduce(p, p, n, type, ncclSum, s->comm, s->comm_stream); break;
    case Kind::kBroadcast: r = ncclBroadcast(p, p, tensor.nbytes(), ncclUint8, root, s->comm, s->comm_stream); break;
    case Kind::kReduceScatter: r = ncclReduceScatter(buf, own, shard, type, ncclSum, s->comm, s->comm_stream); break;
    case Kind::kAllgather: r = ncclAllGather(own, buf, shard * es, ncclUint8, s->comm, s->comm_stream); break;
  }
  return s->SettleLocked(r, Clock::now() + s->timeout);
}

// The result of a flat collective run on `scratch` (the padded copy) back
// into the tensor, on the comm stream after the collective: this rank's
// shard after a reduce-scatter, everything after an all-gather.
cudaError_t CopyBackPadded(NcclGroup::State* s, Kind kind, const Tensor& tensor, const Tensor& scratch) {
  const size_t n = static_cast<size_t>(tensor.numel()), es = tensor.element_size();
  const ShardRange mine = ShardOf(n, s->size, s->rank, es);
  const size_t off = kind == Kind::kReduceScatter ? mine.begin * es : 0;
  const size_t bytes = kind == Kind::kReduceScatter ? mine.size() * es : n * es;
  if (bytes == 0) return cudaSuccess;
  return cudaMemcpyAsync(static_cast<char*>(tensor.raw_data()) + off, static_cast<char*>(scratch.raw_data()) + off,
                         bytes, cudaMemcpyDeviceToDevice, s->comm_stream);
}

std::shared_ptr<Work> Issue(const std::shared_ptr<NcclGroup::State>& s, Kind kind, Tensor tensor, int root,
                            std::string desc) {
  auto fail = [&](absl::Status st) { return std::make_shared<NcclWork>(desc, s, Tensor(), nullptr, std::move(st)); };
  if (absl::Status st = CheckIssue(*s, kind, tensor, root, desc); !st.ok()) return fail(std::move(st));
  std::lock_guard<std::mutex> l(s->mu);
  if (!s->poison.ok()) {
    return fail(absl::Status(s->poison.code(), absl::StrCat(desc, " not run: process group failed earlier: ",
                                                             std::string(s->poison.message()))));
  }
  SetGroupDevice(s->device);
  cudaEvent_t ready = nullptr, done = nullptr;
  cudaError_t e = cudaSuccess;
  Tensor scratch;
  const bool flat = kind == Kind::kReduceScatter || kind == Kind::kAllgather;
  if (flat && tensor.numel() > 0) {
    try {
      if (IssueFlat(s.get(), kind, tensor, &scratch, &e) != ncclSuccess) {
        absl::Status st = absl::InternalError(absl::StrCat(desc, " failed: staging the padded copy: ", CudaErr(e)));
        s->PoisonLocked(st);
        return fail(st);
      }
    } catch (const std::exception& ex) {
      return fail(absl::ResourceExhaustedError(absl::StrCat(desc, ": padded copy: ", ex.what())));
    }
  }
  auto cuda_fail = [&](const char* what) {
    absl::Status st = absl::InternalError(absl::StrCat(desc, " failed: ", what, ": ", CudaErr(e)));
    if (ready) cudaEventDestroy(ready);
    if (done) cudaEventDestroy(done);
    s->PoisonLocked(st);
    return fail(st);
  };
  if ((e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming)) != cudaSuccess) return cuda_fail("cudaEventCreate");
  if ((e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming)) != cudaSuccess) return cuda_fail("cudaEventCreate");
  // compute stream -> comm stream: the collective sees every kernel issued so far.
  if ((e = cudaEventRecord(ready, s->compute_stream)) != cudaSuccess) return cuda_fail("cudaEventRecord");
  if ((e = cudaStreamWaitEvent(s->comm_stream, ready, 0)) != cudaSuccess) return cuda_fail("cudaStreamWaitEvent");
  cudaEventDestroy(ready);  // released once the wait is satisfied
  ready = nullptr;

  ncclResult_t r = ncclSuccess;
  if (tensor.numel() > 0) {
    r = LaunchCollective(s.get(), kind, tensor, scratch, root);
    if (r == ncclSuccess && scratch.defined() && (e = CopyBackPadded(s.get(), kind, tensor, scratch)) != cudaSuccess) {
      return cuda_fail("cudaMemcpyAsync (padded copy back)");
    }
  }
  if (r != ncclSuccess) {
    absl::Status st = r == ncclInProgress
                          ? absl::DeadlineExceededError(absl::StrCat(desc, " timed out while enqueuing"))
                          : absl::UnavailableError(absl::StrCat(desc, " failed: NCCL error ", NcclErr(r, s->comm)));
    cudaEventDestroy(done);
    s->PoisonLocked(st);
    return fail(st);
  }
  if ((e = cudaEventRecord(done, s->comm_stream)) != cudaSuccess) return cuda_fail("cudaEventRecord");
  return std::make_shared<NcclWork>(std::move(desc), s, std::move(tensor), done, absl::OkStatus(), std::move(scratch));
}

}  // namespace

std::shared_ptr<Work> NcclGroup::AllreduceSum(Tensor tensor, const std::string& name) {
  std::string desc = absl::StrCat("allreduce '", name, "' (", internal::FormatBytes(tensor.defined() ? tensor.nbytes() : 0),
                                  ") on rank ", rank_, " of ", size_, " (nccl, cuda:", device_, ")");
  return Issue(state_, Kind::kAllreduce, std::move(tensor), 0, std::move(desc));
}

std::shared_ptr<Work> NcclGroup::ReduceScatterSum(Tensor tensor, const std::string& name) {
  std::string desc = absl::StrCat("reduce-scatter '", name, "' (",
                                  internal::FormatBytes(tensor.defined() ? tensor.nbytes() : 0), ") on rank ", rank_,
                                  " of ", size_, " (nccl, cuda:", device_, ")");
  return Issue(state_, Kind::kReduceScatter, std::move(tensor), 0, std::move(desc));
}

std::shared_ptr<Work> NcclGroup::Allgather(Tensor tensor, const std::string& name) {
  std::string desc = absl::StrCat("all-gather '", name, "' (", internal::FormatBytes(tensor.defined() ? tensor.nbytes() : 0),
                                  ") on rank ", rank_, " of ", size_, " (nccl, cuda:", device_, ")");
  return Issue(state_, Kind::kAllgather, std::move(tensor), 0, std::move(desc));
}

std::shared_ptr<Work> NcclGroup::Broadcast(Tensor tensor, int root, const std::string& name) {
  std::string desc = absl::StrCat("broadcast '", name, "' (", internal::FormatBytes(tensor.defined() ? tensor.nbytes() : 0),
                                  ") from root ", root, " on rank ", rank_, " of ", size_, " (nccl, cuda:", device_, ")");
  return Issue(state_, Kind::kBroadcast, std::move(tensor), root, std::move(desc));
}

absl::StatusOr<std::vector<std::string>> NcclGroup::AllgatherBytes(const std::string& bytes, Millis timeout) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(state_->mu);
    if (!state_->poison.ok()) return state_->poison;
    seq = state_->allgather_seq++;
  }
  const std::string base = absl::StrCat("allgather/", seq, "/");
  absl::Status st = state_->store->Set(absl::StrCat(base, rank_), bytes);
  if (!st.ok()) return Annotate(st, absl::StrCat("allgather #", seq, " on rank ", rank_, " of ", size_));
  std::vector<std::string> out;
  const auto deadline = Clock::now() + timeout;
  for (int r = 0; r < size_; ++r) {
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    absl::StatusOr<std::string> v = state_->store->Get(absl::StrCat(base, r), std::max(left, Millis(0)));
    if (!v.ok()) {
      return Annotate(v.status(), absl::StrCat("allgather #", seq, " on rank ", rank_, " of ", size_,
                                               " (waiting for rank ", r, ")"));
    }
    out.push_back(std::move(*v));
  }
  return out;
}

absl::Status NcclGroup::Barrier(Millis timeout) {
  Tensor t;
  try {
    t = Tensor::Zeros({1}, Device::CUDA(device_));
  } catch (const std::exception& ex) {
    return absl::InternalError(absl::StrCat("barrier on rank ", rank_, ": ", ex.what()));
  }
  auto work = Issue(state_, Kind::kAllreduce, t, 0,
                    absl::StrCat("barrier on rank ", rank_, " of ", size_, " (nccl, cuda:", device_, ")"));
  return work->Wait(timeout);
}

void NcclGroup::Abort(const absl::Status& reason) {
  std::lock_guard<std::mutex> l(state_->mu);
  state_->PoisonLocked(reason.ok() ? absl::AbortedError(absl::StrCat("process group aborted on rank ", rank_))
                                   : reason);
}

}  // namespace psync::comm
