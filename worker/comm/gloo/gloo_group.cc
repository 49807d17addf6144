#include "worker/comm/gloo/gloo_group.h"

#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "psync/common/logging.h"
#include "psync/common/status_macros.h"
#include "worker/comm/gloo/ring.h"
#include "worker/comm/shift.h"
#include "worker/comm/prefix_store.h"
#include "worker/comm/util.h"
#include "psync/tensor/half.h"

namespace psync::comm {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// How long the destructor waits for a communication thread that is still
// inside a Gloo op of a poisoned group before detaching it (it then exits by
// itself within the Gloo timeout, keeping the shared State alive).
constexpr Millis kJoinBound{500};

// ---------------------------------------------------------------- store adapter
// Our Store seen as a gloo::rendezvous::Store. Gloo only calls it from the
// thread running connectFullMesh (inside Create); errors become
// gloo::IoException and the first one is kept so Create can return the
// original status (e.g. DeadlineExceeded naming the missing keys).
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<comm::Store> store, Millis timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status st = store_->Set(key, std::string(data.begin(), data.end()));
    if (!st.ok()) Fail(st);
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v = store_->Get(key, timeout_);  // blocks until present
    if (!v.ok()) Fail(v.status());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const Millis& timeout) override {
    absl::Status st = store_->Wait(keys, timeout.count() > 0 ? timeout : timeout_);
    if (!st.ok()) Fail(st);
  }

  absl::Status first_error() {
    std::lock_guard<std::mutex> l(mu_);
    return first_error_;
  }

 private:
  [[noreturn]] void Fail(const absl::Status& st) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (first_error_.ok()) first_error_ = st;
    }
    throw gloo::IoException(std::string(st.message()));
  }

  const std::shared_ptr<comm::Store> store_;
  const Millis timeout_;
  std::mutex mu_;
  absl::Status first_error_;  // guarded by mu_
};

void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old;
    if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
      struct sigaction sa;
      std::memset(&sa, 0, sizeof(sa));
      sa.sa_handler = SIG_IGN;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGPIPE, &sa, nullptr);
    }
  });
}

absl::Status WithCode(absl::StatusCode code, const std::string& msg) { return absl::Status(code, msg); }

// Gloo reduce function for bfloat16 / float16 stored as uint16_t.
template <typename Half>
void SumHalf(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<uint16_t*>(c);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = Half::FromFloat(Half::ToFloat(x[i]) + Half::ToFloat(y[i]));
}

// ---------------------------------------------------------------- running an op
// Runs one Gloo collective (communication thread only) and turns Gloo's
// exceptions into a Status naming the op. Catches everything.
absl::Status RunGloo(const std::string& desc, const std::string& peer_hint, Millis op_timeout,
                     const std::function<void()>& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    std::string what = e.what();
    if (absl::StrContains(absl::AsciiStrToLower(what), "timed out")) {
      return absl::DeadlineExceededError(absl::StrCat(desc, " timed out after ", internal::FormatDuration(op_timeout),
                                                      " (a peer never arrived or stalled; gloo: ", what, ")"));
    }
    return absl::UnavailableError(absl::StrCat(desc, " failed: connection to ", peer_hint,
                                               " lost (did it die?); gloo: ", what));
  } catch (const gloo::EnforceNotMet& e) {
    return absl::AbortedError(absl::StrCat(desc, " failed: gloo: ", e.what()));
  } catch (const std::exception& e) {
    return absl::AbortedError(absl::StrCat(desc, " failed: ", e.what()));
  } catch (...) {
    return absl::AbortedError(absl::StrCat(desc, " failed: unknown exception"));
  }
}

}  // namespace

// ---------------------------------------------------------------- group state
// What the group's ops share with the communication thread. The Gloo
// context's collectives are touched only by the op that runs (one at a
// time, in issue order: internal::SerialQueue); Abort may close its pairs
// from any thread.
struct GlooGroup::State {
  // Immutable after Create().
  int rank = 0;
  int size = 0;
  Millis timeout{30000};
  std::string peer_hint;  // "peer rank 1" in a world of 2, else "a peer" (gloo names its address)
  std::shared_ptr<GlooStoreAdapter> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  // Wakes the ring ops' waits on a lost connection (declared after ctx: it
  // stops its thread before the context goes).
  std::unique_ptr<gloo_ring::PeerWatch> watch;
  // The running op's tag: ops run one at a time in issue order, so every
  // rank gives the same op the same tag. Each op may use tag and tag+1.
  std::atomic<uint32_t> next_tag{0};

  // Closes every pair's socket so peers blocked in a collective with us fail
  // fast ("connection reset by peer") instead of waiting for their timeout.
  // Our own communication thread, if blocked in a Gloo op, is not woken by
  // this (this Gloo snapshot exposes no public way to do so); it leaves the op
  // within the Gloo context timeout (= GlooOptions::timeout), and the
  // destructor detaches it if it is still blocked then.
  void CloseConnections() {
    try {
      ctx->closeConnections();
    } catch (...) {
      // Best effort; the Gloo timeout still bounds every op.
    }
  }
};

std::shared_ptr<Work> GlooGroup::Enqueue(std::string desc, GlooFn fn) {
  std::shared_ptr<State> s = state_;
  return queue_->Enqueue(desc, [s, desc, fn = std::move(fn)](internal::SerialQueue::Clock::time_point) {
    const uint32_t tag = s->next_tag.fetch_add(2);
    return RunGloo(desc, s->peer_hint, s->timeout, [&] { fn(s->ctx, tag); });
  });
}

// ---------------------------------------------------------------- group
absl::StatusOr<std::unique_ptr<ProcessGroup>> GlooGroup::Create(std::shared_ptr<Store> store, int rank, int size,
                                                                GlooOptions options) {
  if (!store) return absl::InvalidArgumentError("GlooGroup::Create: store is null");
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("GlooGroup::Create: bad rank ", rank, " of ", size));
  }
  if (options.timeout.count() <= 0) return absl::InvalidArgumentError("GlooGroup::Create: timeout must be > 0");
  IgnoreSigpipeOnce();

  std::shared_ptr<Store> scoped = options.prefix.empty() ? store : std::make_shared<PrefixStore>(options.prefix, store);
  auto state = std::make_shared<State>();
  state->rank = rank;
  state->size = size;
  state->timeout = options.timeout;
  state->peer_hint = size == 2 ? absl::StrCat("peer rank ", 1 - rank) : std::string("a peer");
  state->store = std::make_shared<GlooStoreAdapter>(scoped, options.timeout);
  const std::string where = absl::StrCat("gloo rendezvous of rank ", rank, " of ", size, " (",
                                         options.iface.empty() ? "host " + options.hostname : "iface " + options.iface,
                                         options.prefix.empty() ? "" : ", prefix '" + options.prefix + "'", ")");
  try {
    gloo::transport::tcp::attr attr;
    if (!options.iface.empty()) {
      attr.iface = options.iface;
    } else {
      attr.hostname = options.hostname;
    }
    attr.ai_family = AF_INET;
    state->device = gloo::transport::tcp::CreateDevice(attr);
    state->ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    state->ctx->setTimeout(options.timeout);
    state->ctx->connectFullMesh(*state->store, state->device);
    state->watch = std::make_unique<gloo_ring::PeerWatch>(state->ctx);
  } catch (const std::exception& e) {
    absl::Status st = state->store->first_error();
    if (!st.ok()) return Annotate(st, where);
    const bool timed_out = absl::StrContains(absl::AsciiStrToLower(e.what()), "timed out");
    return WithCode(timed_out ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable,
                    absl::StrCat(where, " failed: ", e.what()));
  } catch (...) {
    return absl::UnavailableError(absl::StrCat(where, " failed: unknown exception"));
  }
  return std::unique_ptr<ProcessGroup>(new GlooGroup(rank, size, std::move(options), std::move(state)));
}

GlooGroup::GlooGroup(int rank, int size, GlooOptions options, std::shared_ptr<State> state)
    : rank_(rank), size_(size), options_(std::move(options)), state_(std::move(state)) {
  std::weak_ptr<State> weak = state_;
  queue_ = internal::SerialQueue::Start([weak](const absl::Status&) {
    // Why: peers blocked in a collective with us fail fast instead of
    // waiting for their timeout.
    if (auto s = weak.lock()) s->CloseConnections();
  });
}

GlooGroup::~GlooGroup() {
  // A thread still inside a Gloo op of a poisoned group is detached after
  // kJoinBound; it ends by itself within the Gloo timeout (the queue and the
  // op keep what it uses alive).
  queue_->Stop(kJoinBound);
}

absl::Status GlooGroup::health() const { return queue_->health(); }

std::string GlooGroup::Describe(const char* what, const std::string& name, const Tensor& t) const {
  return absl::StrCat(what, " '", name, "' (", internal::FormatBytes(t.defined() ? t.nbytes() : 0), ") on rank ",
                      rank_, " of ", size_);
}

std::shared_ptr<Work> GlooGroup::AllreduceSum(Tensor tensor, const std::string& name) {
  const std::string desc = Describe("allreduce", name, tensor);
  const bool half = tensor.defined() && (tensor.dtype() == kBFloat16 || tensor.dtype() == kFloat16);
  if (!tensor.defined() || !tensor.device().is_cpu() || !(tensor.dtype() == kFloat32 || half) ||
      !tensor.is_contiguous()) {
    return internal::SerialQueue::Failed(desc, absl::InvalidArgumentError(absl::StrCat(
                            desc, ": gloo sums a contiguous float32/bfloat16/float16 CPU tensor, got ",
                            tensor.defined() ? tensor.DebugString() : std::string("an undefined tensor"))));
  }
  const Millis timeout = options_.timeout;
  return Enqueue(desc, [tensor, timeout](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
    const size_t n = static_cast<size_t>(tensor.numel());
    if (n == 0) return;
    gloo::AllreduceOptions opts(ctx);
    if (tensor.dtype() == kFloat32) {
      opts.setOutput(tensor.data<float>(), n);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    } else {
      // 16-bit elements: Gloo moves them as uint16_t; each pairwise step
      // adds in float and rounds back (as torch.distributed's gloo does).
      opts.setOutput(static_cast<uint16_t*>(tensor.raw_data()), n);
      opts.setReduceFunction(tensor.dtype() == kBFloat16 ? &SumHalf<BFloat16> : &SumHalf<Float16>);
    }
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::allreduce(opts);
  });
}

absl::Status GlooGroup::CheckFlat(const std::string& desc, const Tensor& tensor, bool sum) const {
  const bool half = tensor.defined() && (tensor.dtype() == kBFloat16 || tensor.dtype() == kFloat16);
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous() ||
      (sum && !(tensor.dtype() == kFloat32 || half))) {
    return absl::InvalidArgumentError(absl::StrCat(
        desc, sum ? ": gloo reduce-scatters a contiguous float32/bfloat16/float16 CPU tensor, got "
                  : ": gloo all-gathers a contiguous CPU tensor, got ",
        tensor.defined() ? tensor.DebugString() : std::string("an undefined tensor")));
  }
  return absl::OkStatus();
}

std::shared_ptr<Work> GlooGroup::ReduceScatterSum(Tensor tensor, const std::string& name) {
  const std::string desc = Describe("reduce-scatter", name, tensor);
  if (absl::Status st = CheckFlat(desc, tensor, /*sum=*/true); !st.ok()) {
    return internal::SerialQueue::Failed(desc, st);
  }
  const Millis timeout = options_.timeout;
  // The watch lives in the State, which the queued op keeps alive.
  gloo_ring::PeerWatch* watch = state_->watch.get();
  return Enqueue(desc, [tensor, timeout, watch](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
    gloo_ring::ReduceScatter(ctx, watch, tag, timeout, tensor.raw_data(), static_cast<size_t>(tensor.numel()),
                             tensor.dtype());
  });
}

std::shared_ptr<Work> GlooGroup::Allgather(Tensor tensor, const std::string& name) {
  const std::string desc = Describe("all-gather", name, tensor);
  if (absl::Status st = CheckFlat(desc, tensor, /*sum=*/false); !st.ok()) {
    return internal::SerialQueue::Failed(desc, st);
  }
  const Millis timeout = options_.timeout;
  gloo_ring::PeerWatch* watch = state_->watch.get();
  return Enqueue(desc, [tensor, timeout, watch](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
    gloo_ring::Allgather(ctx, watch, tag, timeout, tensor.raw_data(), static_cast<size_t>(tensor.numel()),
                         tensor.element_size());
  });
}

std::shared_ptr<Work> GlooGroup::Shift(Tensor send, Tensor recv, int distance, const std::string& name) {
  const std::string desc = absl::StrCat("shift '", name, "' (", internal::FormatBytes(send.defined() ? send.nbytes() : 0),
                                        ") by ", distance, " on rank ", rank_, " of ", size_);
  if (absl::Status st = internal::CheckShift(send, recv, distance, size_, desc); !st.ok()) {
    return internal::SerialQueue::Failed(desc, st);
  }
  if (!send.device().is_cpu()) {
    return internal::SerialQueue::Failed(desc, absl::InvalidArgumentError(absl::StrCat(desc, ": gloo needs CPU tensors")));
  }
  const internal::ShiftPeers peers = internal::PeersOf(rank_, size_, distance);
  const Millis timeout = options_.timeout;
  gloo_ring::PeerWatch* watch = state_->watch.get();
  return Enqueue(desc, [send, recv, peers, timeout, watch](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
    gloo_ring::Shift(ctx, watch, tag, timeout, send.raw_data(), recv.raw_data(), send.nbytes(), peers.to, peers.from);
  });
}

std::shared_ptr<Work> GlooGroup::Broadcast(Tensor tensor, int root, const std::string& name) {
  const std::string desc =
      absl::StrCat("broadcast '", name, "' (", internal::FormatBytes(tensor.defined() ? tensor.nbytes() : 0),
                   ") from root ", root, " on rank ", rank_, " of ", size_);
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous()) {
    return internal::SerialQueue::Failed(desc, absl::InvalidArgumentError(absl::StrCat(desc, ": gloo needs a defined, contiguous CPU tensor")));
  }
  if (root < 0 || root >= size_) {
    return internal::SerialQueue::Failed(desc, absl::InvalidArgumentError(absl::StrCat(desc, ": root out of range")));
  }
  const Millis timeout = options_.timeout;
  return Enqueue(desc,
                         [tensor, root, timeout](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
                           // Bytes: any dtype broadcasts the same way.
                           const size_t n = tensor.nbytes();
                           if (n == 0) return;
                           gloo::BroadcastOptions opts(ctx);
                           opts.setOutput(static_cast<uint8_t*>(tensor.raw_data()), n);
                           opts.setRoot(root);
                           opts.setTag(tag);
                           opts.setTimeout(timeout);
                           gloo::broadcast(opts);
                         });
}

absl::StatusOr<std::vector<std::string>> GlooGroup::AllgatherBytes(const std::string& bytes, Millis timeout) {
  const std::string desc = absl::StrCat("allgather (", internal::FormatBytes(bytes.size()), ") on rank ", rank_,
                                        " of ", size_);
  auto result = std::make_shared<std::vector<std::string>>();
  const int size = size_;
  const Millis op_timeout = options_.timeout;
  auto work = Enqueue(
      desc, [bytes, result, size, op_timeout](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
        // 1) everyone's length, 2) everyone's bytes padded to the longest.
        int64_t mine = static_cast<int64_t>(bytes.size());
        std::vector<int64_t> lens(static_cast<size_t>(size), 0);
        gloo::AllgatherOptions o1(ctx);
        o1.setInput(&mine, 1);
        o1.setOutput(lens.data(), lens.size());
        o1.setTag(tag);
        o1.setTimeout(op_timeout);
        gloo::allgather(o1);
        const size_t width = static_cast<size_t>(std::max<int64_t>(1, *std::max_element(lens.begin(), lens.end())));
        std::vector<char> in(width, 0), out(width * static_cast<size_t>(size), 0);
        std::copy(bytes.begin(), bytes.end(), in.begin());
        gloo::AllgatherOptions o2(ctx);
        o2.setInput(in.data(), in.size());
        o2.setOutput(out.data(), out.size());
        o2.setTag(tag + 1);
        o2.setTimeout(op_timeout);
        gloo::allgather(o2);
        result->clear();
        for (int r = 0; r < size; ++r) {
          const char* p = out.data() + static_cast<size_t>(r) * width;
          result->emplace_back(p, static_cast<size_t>(lens[static_cast<size_t>(r)]));
        }
      });
  absl::Status st = work->Wait(timeout);
  if (!st.ok()) return st;
  return *result;
}

absl::Status GlooGroup::Barrier(Millis timeout) {
  const std::string desc = absl::StrCat("barrier on rank ", rank_, " of ", size_);
  const Millis op_timeout = options_.timeout;
  auto work = Enqueue(desc, [op_timeout](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
    gloo::BarrierOptions opts(ctx);
    opts.setTag(tag);
    opts.setTimeout(op_timeout);
    gloo::barrier(opts);
  });
  return work->Wait(timeout);
}

void GlooGroup::Abort(const absl::Status& reason) {
  queue_->Poison(reason.ok() ? absl::AbortedError(absl::StrCat("process group aborted on rank ", rank_)) : reason);
}

}  // namespace psync::comm
