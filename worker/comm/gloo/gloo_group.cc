#include "worker/comm/gloo/gloo_group.h"

#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
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
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/comm/prefix_store.h"
#include "worker/comm/util.h"
#include "worker/tensor/half.h"

namespace psync::comm {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
using GlooFn = std::function<void(const std::shared_ptr<gloo::Context>&, uint32_t tag)>;

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

}  // namespace

// ---------------------------------------------------------------- work
class GlooWork : public Work {
 public:
  GlooWork(std::string desc, std::weak_ptr<GlooGroup::State> group, GlooFn fn, uint32_t tag, Millis op_timeout,
           std::string peer_hint = "a peer")
      : desc_(std::move(desc)),
        group_(std::move(group)),
        fn_(std::move(fn)),
        tag_(tag),
        op_timeout_(op_timeout),
        peer_hint_(std::move(peer_hint)) {}

  absl::Status Wait(Millis timeout) override;
  bool IsCompleted() override {
    std::lock_guard<std::mutex> l(mu_);
    return done_;
  }
  std::string Describe() const override { return desc_; }

  // First completion wins; returns whether this call completed the work.
  bool Complete(const absl::Status& st) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (done_) return false;
      done_ = true;
      status_ = st;
    }
    cv_.notify_all();
    return true;
  }

  // Runs the collective; communication thread only. Catches everything.
  absl::Status Run(const std::shared_ptr<gloo::Context>& ctx) {
    try {
      fn_(ctx, tag_);
      return absl::OkStatus();
    } catch (const gloo::IoException& e) {
      std::string what = e.what();
      if (absl::StrContains(absl::AsciiStrToLower(what), "timed out")) {
        return absl::DeadlineExceededError(absl::StrCat(desc_, " timed out after ", internal::FormatDuration(op_timeout_),
                                                        " (a peer never arrived or stalled; gloo: ", what, ")"));
      }
      return absl::UnavailableError(absl::StrCat(desc_, " failed: connection to ", peer_hint_,
                                                 " lost (did it die?); gloo: ", what));
    } catch (const gloo::EnforceNotMet& e) {
      return absl::AbortedError(absl::StrCat(desc_, " failed: gloo: ", e.what()));
    } catch (const std::exception& e) {
      return absl::AbortedError(absl::StrCat(desc_, " failed: ", e.what()));
    } catch (...) {
      return absl::AbortedError(absl::StrCat(desc_, " failed: unknown exception"));
    }
  }

  // Takes the callable's resources (tensor handles) off the work once it ran.
  const std::string& desc() const { return desc_; }

 private:
  // Immutable after construction.
  const std::string desc_;
  const std::weak_ptr<GlooGroup::State> group_;
  const GlooFn fn_;  // holds the tensor handles: memory stays alive while the op may run
  const uint32_t tag_;
  const Millis op_timeout_;
  const std::string peer_hint_;  // "peer rank 1" in a world of 2, else "a peer" (gloo names its address)
  // Guarded by mu_ (any thread).
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::Status status_;
};

// ---------------------------------------------------------------- group state
struct GlooGroup::State {
  // Immutable after Create().
  int rank = 0;
  int size = 0;
  Millis timeout{30000};
  std::shared_ptr<GlooStoreAdapter> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> ctx;

  // Guarded by mu (one lock for the group).
  std::mutex mu;
  std::condition_variable cv;                   // queue/stop/exited changes
  std::deque<std::shared_ptr<GlooWork>> queue;  // issued, not started
  std::shared_ptr<GlooWork> running;            // being run by the comm thread
  absl::Status poison;                          // first failure; OK while healthy
  bool stop = false;                            // destructor asks the thread to exit
  bool exited = false;                          // the thread left Loop()
  bool closed = false;                          // connections closed after poisoning
  uint32_t next_tag = 0;

  // Poisons the group with `reason` (first reason wins) and fails the queued
  // and running work at once. Closes the Gloo connections so peers blocked
  // in a collective with us fail fast instead of waiting for their timeout.
  void Poison(const absl::Status& reason) {
    std::vector<std::shared_ptr<GlooWork>> fail;
    absl::Status original;
    bool close_now = false;
    {
      std::lock_guard<std::mutex> l(mu);
      if (poison.ok()) poison = reason;
      original = poison;
      for (auto& w : queue) fail.push_back(std::move(w));
      queue.clear();
      if (running) fail.push_back(running);
      if (!closed) closed = close_now = true;
    }
    cv.notify_all();
    for (auto& w : fail) {
      w->Complete(WithCode(original.code(), absl::StrCat(w->desc(), " not completed: process group failed: ",
                                                        std::string(original.message()))));
    }
    if (close_now && ctx) CloseConnections();
  }

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

  std::shared_ptr<Work> Enqueue(const std::shared_ptr<State>& self, std::string desc, GlooFn fn) {
    std::shared_ptr<GlooWork> w;
    absl::Status poisoned;
    {
      std::lock_guard<std::mutex> l(mu);
      const uint32_t tag = next_tag;
      next_tag += 2;  // each op may use tag and tag+1
      w = std::make_shared<GlooWork>(std::move(desc), self, std::move(fn), tag, timeout,
                                     size == 2 ? absl::StrCat("peer rank ", 1 - rank) : std::string("a peer"));
      poisoned = poison;
      if (poisoned.ok()) queue.push_back(w);
    }
    if (!poisoned.ok()) {
      w->Complete(WithCode(poisoned.code(), absl::StrCat(w->desc(), " not run: process group failed earlier: ",
                                                        std::string(poisoned.message()))));
    } else {
      cv.notify_all();
    }
    return w;
  }

  // The communication thread.
  void Loop() {
    while (true) {
      std::shared_ptr<GlooWork> w;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return stop || !queue.empty(); });
        if (queue.empty()) break;  // stop requested and nothing left
        w = std::move(queue.front());
        queue.pop_front();
        running = w;
      }
      absl::Status st = w->Run(ctx);
      {
        std::lock_guard<std::mutex> l(mu);
        running.reset();
      }
      if (!st.ok()) Poison(st);
      w->Complete(st);  // no-op when Poison/Abort/Wait already failed it
    }
    {
      std::lock_guard<std::mutex> l(mu);
      exited = true;
    }
    cv.notify_all();
  }
};

absl::Status GlooWork::Wait(Millis timeout) {
  {
    std::unique_lock<std::mutex> l(mu_);
    if (cv_.wait_for(l, timeout, [&] { return done_; })) return status_;
  }
  absl::Status deadline =
      absl::DeadlineExceededError(absl::StrCat(desc_, " timed out after ", internal::FormatDuration(timeout)));
  if (auto g = group_.lock()) {
    g->Poison(deadline);  // fails this work (queued or running) with the first reason
  }
  Complete(deadline);  // in case the group is gone or the work was not found
  std::lock_guard<std::mutex> l(mu_);
  return status_;
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
  // The thread owns a reference to State, so a detached thread stays valid.
  thread_ = std::thread([s = state_] { s->Loop(); });
}

GlooGroup::~GlooGroup() {
  bool busy;
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->stop = true;
    busy = state_->running != nullptr || !state_->queue.empty();
  }
  if (busy) state_->Poison(absl::AbortedError("process group destroyed with collectives pending"));
  state_->cv.notify_all();
  bool exited;
  {
    std::unique_lock<std::mutex> l(state_->mu);
    exited = state_->cv.wait_for(l, kJoinBound, [&] { return state_->exited; });
  }
  if (exited) {
    thread_.join();
  } else {
    PSYNC_LOG(WARNING) << "gloo communication thread of rank " << rank_ << " still blocked in a collective after "
                       << kJoinBound.count() << "ms; detaching it (it ends within the gloo timeout)";
    thread_.detach();
  }
}

absl::Status GlooGroup::health() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->poison;
}

namespace {
std::shared_ptr<Work> Failed(std::string desc, absl::Status st) {
  auto w = std::make_shared<GlooWork>(std::move(desc), std::weak_ptr<GlooGroup::State>(), GlooFn(), 0, Millis(0));
  w->Complete(st);
  return w;
}
}  // namespace

std::shared_ptr<Work> GlooGroup::AllreduceSum(Tensor tensor, const std::string& name) {
  const std::string desc =
      absl::StrCat("allreduce '", name, "' (", internal::FormatBytes(tensor.defined() ? tensor.nbytes() : 0),
                   ") on rank ", rank_, " of ", size_);
  const bool half = tensor.defined() && (tensor.dtype() == kBFloat16 || tensor.dtype() == kFloat16);
  if (!tensor.defined() || !tensor.device().is_cpu() || !(tensor.dtype() == kFloat32 || half) ||
      !tensor.is_contiguous()) {
    return Failed(desc, absl::InvalidArgumentError(absl::StrCat(
                            desc, ": gloo sums a contiguous float32/bfloat16/float16 CPU tensor, got ",
                            tensor.defined() ? tensor.DebugString() : std::string("an undefined tensor"))));
  }
  const Millis timeout = options_.timeout;
  return state_->Enqueue(state_, desc, [tensor, timeout](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
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

std::shared_ptr<Work> GlooGroup::Broadcast(Tensor tensor, int root, const std::string& name) {
  const std::string desc =
      absl::StrCat("broadcast '", name, "' (", internal::FormatBytes(tensor.defined() ? tensor.nbytes() : 0),
                   ") from root ", root, " on rank ", rank_, " of ", size_);
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous()) {
    return Failed(desc, absl::InvalidArgumentError(absl::StrCat(desc, ": gloo needs a defined, contiguous CPU tensor")));
  }
  if (root < 0 || root >= size_) {
    return Failed(desc, absl::InvalidArgumentError(absl::StrCat(desc, ": root out of range")));
  }
  const Millis timeout = options_.timeout;
  return state_->Enqueue(state_, desc,
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

absl::StatusOr<std::vector<std::string>> GlooGroup::Allgather(const std::string& bytes, Millis timeout) {
  const std::string desc = absl::StrCat("allgather (", internal::FormatBytes(bytes.size()), ") on rank ", rank_,
                                        " of ", size_);
  auto result = std::make_shared<std::vector<std::string>>();
  const int size = size_;
  const Millis op_timeout = options_.timeout;
  auto work = state_->Enqueue(
      state_, desc, [bytes, result, size, op_timeout](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
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
  auto work = state_->Enqueue(state_, desc, [op_timeout](const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
    gloo::BarrierOptions opts(ctx);
    opts.setTag(tag);
    opts.setTimeout(op_timeout);
    gloo::barrier(opts);
  });
  return work->Wait(timeout);
}

void GlooGroup::Abort(const absl::Status& reason) {
  state_->Poison(reason.ok() ? absl::AbortedError(absl::StrCat("process group aborted on rank ", rank_)) : reason);
}

}  // namespace psync::comm
