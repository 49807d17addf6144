#include "worker/comm/shm/shm_context.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "psync/common/logging.h"
#include "psync/common/status_macros.h"
#include "worker/comm/prefix_store.h"
#include "worker/comm/shm/futex.h"
#include "worker/comm/shm/segment_name.h"
#include "worker/comm/util.h"

namespace psync::comm::shm {
namespace {

using Millis = std::chrono::milliseconds;
using Micros = std::chrono::microseconds;

// How long one futex sleep lasts before the waiter re-checks abort flags,
// liveness and the deadline (so a local Abort is seen within this).
constexpr Micros kSleepSlice{2000};
// How often a waiter reads the peer's /proc entry (about 10 us each).
constexpr Millis kLivenessEvery{10};
// Heartbeat period, and how long a silent heartbeat means "dead".
constexpr Millis kBeatEvery{100};
constexpr Millis kBeatStale{3000};

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

uint64_t RandomNonce() {
  std::random_device rd;
  const uint64_t a = rd(), b = rd();
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return ((a << 32) ^ b ^ t) | 1;  // never 0
}

// Writes `reason` NUL-terminated into `out` (`cap` bytes). One too long
// keeps its head (what failed) and its tail (the cause: nested errors end
// with it), the middle elided.
void WriteReason(char* out, size_t cap, absl::string_view reason) {
  constexpr absl::string_view kGap = " [...] ";
  if (reason.size() < cap) {
    std::memcpy(out, reason.data(), reason.size());
    out[reason.size()] = '\0';
    return;
  }
  const size_t head = (cap - 1 - kGap.size()) / 3, tail = cap - 1 - kGap.size() - head;
  char* at = std::copy_n(reason.data(), head, out);
  at = std::copy_n(kGap.data(), kGap.size(), at);
  at = std::copy_n(reason.data() + reason.size() - tail, tail, at);
  *at = '\0';
}

// The arguments of ShmContext::Create, checked before anything is created.
absl::Status CheckCreateArgs(const std::vector<int>& members, int me, const ShmOptions& options, bool has_store) {
  const int n = static_cast<int>(members.size());
  if (n < 1 || me < 0 || me >= n) {
    return absl::InvalidArgumentError(absl::StrCat("shm group: bad local rank ", me, " of ", n));
  }
  for (int i = 1; i < n; ++i) {
    if (members[static_cast<size_t>(i)] <= members[static_cast<size_t>(i - 1)]) {
      return absl::InvalidArgumentError("shm group: member ranks must be ascending and distinct");
    }
  }
  if (options.slots < 2 || options.slots > kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat("shm group: workspace slots must be 2..", kMaxSlots));
  }
  if (options.slot_bytes % kCacheLine != 0 || options.slot_bytes < kCacheLine * static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(absl::StrCat("shm group: slot size ", options.slot_bytes,
                                                   " must be a multiple of 64 and at least 64 x ", n, " ranks"));
  }
  if (options.timeout.count() <= 0) return absl::InvalidArgumentError("shm group: timeout must be > 0");
  if (n > 1 && !has_store) return absl::InvalidArgumentError("shm group: store is null");
  return absl::OkStatus();
}

}  // namespace

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kReduceScatter: return "reduce-scatter";
    case OpKind::kAllgather: return "all-gather";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kReduce: return "reduce";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kAllgatherBytes: return "allgather";
    case OpKind::kRegisterBuffer: return "buffer registration";
    case OpKind::kAllreduceInPlace: return "in-place allreduce";
    case OpKind::kReduceScatterInPlace: return "in-place reduce-scatter";
    case OpKind::kAllgatherInPlace: return "in-place all-gather";
  }
  return "collective";
}

ShmContext::ShmContext(std::vector<int> members, int me, ShmOptions options)
    : members_(std::move(members)),
      me_(me),
      options_(std::move(options)),
      spin_(options_.spin ? SpinPolicy::Fixed(*options_.spin)
                          : SpinPolicy::Adaptive(options_.usable_cores > 0 ? options_.usable_cores : UsableCores(),
                                                 static_cast<int>(members_.size()))) {}

absl::StatusOr<std::shared_ptr<ShmContext>> ShmContext::Create(std::shared_ptr<Store> store, std::vector<int> members,
                                                               int me, ShmOptions options) {
  PSYNC_RETURN_IF_ERROR(CheckCreateArgs(members, me, options, store != nullptr));
  const int n = static_cast<int>(members.size());
  std::shared_ptr<ShmContext> ctx(new ShmContext(std::move(members), me, std::move(options)));
  ctx->beats_.resize(static_cast<size_t>(n));
  if (n == 1) return ctx;

  const ShmOptions& o = ctx->options_;
  const int grank = ctx->global_rank(me);
  const std::string where = absl::StrCat("shm rendezvous of rank ", grank, " (local ", me, " of ", n, ", prefix '",
                                         o.prefix, "')");
  const std::vector<std::string> stale = RemoveStaleSegments();
  if (!stale.empty()) {
    PSYNC_LOG(INFO) << "removed " << stale.size() << " stale shared-memory segment(s) of dead processes from /dev/shm: "
                    << absl::StrJoin(stale, ", ");
  }
  std::shared_ptr<Store> scoped =
      o.prefix.empty() ? store : std::make_shared<PrefixStore>(absl::StrCat(o.prefix, "/shm"), store);
  const ProcessIdentity self = SelfIdentity();
  const size_t bytes = kControlBytes + static_cast<size_t>(o.slots) * o.slot_bytes;
  const std::string name = ctx->SegmentNameOf(self, me, "");
  absl::StatusOr<uint64_t> nonce = ctx->CreateOwnWorkspace(self, name, bytes);
  if (!nonce.ok()) return Annotate(nonce.status(), where);

  PSYNC_RETURN_IF_ERROR(Annotate(scoped->Set(absl::StrCat("seg/", grank), absl::StrCat(name, " ", *nonce)), where));
  std::vector<std::string> keys;
  for (int q = 0; q < n; ++q) keys.push_back(absl::StrCat("seg/", ctx->global_rank(q)));
  PSYNC_RETURN_IF_ERROR(Annotate(scoped->Wait(keys, o.timeout), where));

  ctx->peers_.resize(static_cast<size_t>(n));
  ctx->blocks_.assign(static_cast<size_t>(n), nullptr);
  ctx->heartbeat_watch_.assign(static_cast<size_t>(n), false);
  ctx->blocks_[static_cast<size_t>(me)] = static_cast<ControlBlock*>(ctx->own_.data());
  bool any_heartbeat = false;
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    PSYNC_RETURN_IF_ERROR(ctx->MapPeer(*scoped, q, keys[static_cast<size_t>(q)], bytes, self, where));
    any_heartbeat = any_heartbeat || ctx->heartbeat_watch_[static_cast<size_t>(q)];
  }
  // Why wait before unlinking: a peer that has not opened our name yet
  // would find nothing. After this nothing of the group is in /dev/shm.
  PSYNC_RETURN_IF_ERROR(Annotate(scoped->Set(absl::StrCat("mapped/", grank), "1"), where));
  std::vector<std::string> mapped;
  for (int q = 0; q < n; ++q) mapped.push_back(absl::StrCat("mapped/", ctx->global_rank(q)));
  PSYNC_RETURN_IF_ERROR(Annotate(scoped->Wait(mapped, o.timeout), where));
  ctx->own_.Unlink();
  if (any_heartbeat) {
    ShmContext* raw = ctx.get();
    ctx->beat_thread_ = std::thread([raw] { raw->HeartbeatLoop(); });
  }
  return ctx;
}

absl::StatusOr<uint64_t> ShmContext::CreateOwnWorkspace(const ProcessIdentity& self, const std::string& name,
                                                        size_t bytes) {
  absl::StatusOr<ShmSegment> own = ShmSegment::Create(name, bytes);
  if (!own.ok()) return own.status();
  own_ = std::move(*own);
  auto* cb = new (own_.data()) ControlBlock();
  const uint64_t nonce = RandomNonce();
  cb->magic = kWorkspaceMagic;
  cb->version = kWorkspaceVersion;
  cb->rank = global_rank(me_);
  cb->nonce = nonce;
  cb->pid = self.pid;
  cb->start_time = self.start_time;
  cb->pid_ns = self.pid_ns;
  cb->slot_bytes = options_.slot_bytes;
  cb->slots = static_cast<uint32_t>(options_.slots);
  std::atomic_thread_fence(std::memory_order_release);
  return nonce;
}

absl::Status ShmContext::MapPeer(Store& store, int q, const std::string& key, size_t bytes,
                                 const ProcessIdentity& self, const std::string& where) {
  const ShmOptions& o = options_;
  const int grank = global_rank(me_);
  const int g = global_rank(q);
  absl::StatusOr<std::string> v = store.Get(key, o.timeout);
  if (!v.ok()) return Annotate(v.status(), where);
  std::vector<std::string> parts = absl::StrSplit(*v, ' ');
  uint64_t peer_nonce = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &peer_nonce)) {
    return absl::InternalError(absl::StrCat(where, ": malformed segment record of rank ", g, ": '", *v, "'"));
  }
  absl::StatusOr<ShmSegment> seg = ShmSegment::Open(parts[0], bytes);
  if (!seg.ok()) {
    if (seg.status().code() == absl::StatusCode::kNotFound) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": the shared-memory segment of rank ", g, " (/dev/shm", parts[0],
          ") is not visible here: ranks ", grank, " and ", g,
          " were put on the same host but do not share /dev/shm (check PSYNC_HOST_ID / LOCAL_WORLD_SIZE, or use "
          "--backend=gloo)"));
    }
    return Annotate(seg.status(), absl::StrCat(where, ": mapping rank ", g, "'s workspace"));
  }
  auto* pb = static_cast<ControlBlock*>(seg->data());
  std::atomic_thread_fence(std::memory_order_acquire);
  if (pb->magic != kWorkspaceMagic || pb->version != kWorkspaceVersion || pb->nonce != peer_nonce ||
      pb->rank != g || pb->slot_bytes != o.slot_bytes || pb->slots != static_cast<uint32_t>(o.slots)) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": /dev/shm", parts[0], " is not rank ", g, "'s workspace of this group (a different psync build, "
        "different --shm options, or a segment of another host with the same name)"));
  }
  peers_[static_cast<size_t>(q)] = std::move(*seg);
  blocks_[static_cast<size_t>(q)] = pb;
  heartbeat_watch_[static_cast<size_t>(q)] = o.force_heartbeat || pb->pid_ns != self.pid_ns;
  return absl::OkStatus();
}

ShmContext::~ShmContext() {
  if (beat_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> l(beat_mu_);
      beat_stop_ = true;
    }
    beat_cv_.notify_all();
    beat_thread_.join();
  }
  if (!blocks_.empty()) {
    // Why: a peer still waiting on us (it issued a collective we never
    // will) learns at once that we are gone instead of timing out.
    Abort(absl::CancelledError(absl::StrCat("rank ", global_rank(me_), " closed its process group")));
  }
}

std::string ShmContext::SegmentNameOf(const ProcessIdentity& creator, int local, const std::string& suffix) const {
  return SegmentName(creator, absl::StrCat(options_.job_tag, ".", options_.prefix, ".r", global_rank(local), suffix));
}

std::string ShmContext::PeerSegmentName(int local, const std::string& suffix) const {
  const ControlBlock* b = block(local);
  return SegmentNameOf(ProcessIdentity{b->pid, b->start_time, b->pid_ns}, local, suffix);
}

void ShmContext::HeartbeatLoop() {
  std::unique_lock<std::mutex> l(beat_mu_);
  while (!beat_stop_) {
    block(me_)->heartbeat.fetch_add(1, std::memory_order_release);
    beat_cv_.wait_for(l, kBeatEvery, [&] { return beat_stop_; });
  }
}

void ShmContext::Abort(const absl::Status& reason) {
  {
    std::lock_guard<std::mutex> l(abort_mu_);
    if (!abort_reason_.ok()) return;
    abort_reason_ = reason.ok() ? absl::AbortedError(absl::StrCat("process group aborted on rank ",
                                                                  global_rank(me_)))
                                : reason;
  }
  abort_flag_.store(true, std::memory_order_release);
  if (blocks_.empty()) return;
  ControlBlock* b = block(me_);
  uint32_t expected = 0;
  if (b->abort_state.compare_exchange_strong(expected, 1)) {
    WriteReason(b->abort_reason, sizeof(b->abort_reason), reason.message());
    b->abort_state.store(2, std::memory_order_release);
  }
  b->bell.fetch_add(1);
  FutexWakeAll(&b->bell);
}

absl::Status ShmContext::aborted() const {
  std::lock_guard<std::mutex> l(abort_mu_);
  return abort_reason_;
}

void ShmContext::BeginOp(Op& op) {
  op.d.seq = op_seq_++;
  op.first_step = 0;
}

absl::StatusOr<uint64_t> ShmContext::BeginStep(Op& op) {
  const uint64_t s = ++step_;
  const uint64_t slots = static_cast<uint64_t>(options_.slots);
  if (s > slots) {
    for (int q = 0; q < local_size(); ++q) {
      if (q == me_) continue;
      PSYNC_RETURN_IF_ERROR(WaitPeer(q, kConsumed, s - slots, op, "release of our workspace slot"));
    }
  }
  if (op.first_step == 0) {
    // Why only now: written before the wait, a rank running ahead could
    // overwrite a descriptor a slow peer has not read yet.
    op.first_step = s;
    block(me_)->descriptors[op.d.seq % kDescriptorRing] = op.d;
  }
  return s;
}

char* ShmContext::Slot(int local, uint64_t step) const {
  char* base = static_cast<char*>(static_cast<void*>(block(local)));
  return base + kControlBytes + static_cast<size_t>(step % static_cast<uint64_t>(options_.slots)) * options_.slot_bytes;
}

void ShmContext::Publish(Counter c, uint64_t step) {
  ControlBlock* b = block(me_);
  b->counters[c].value.store(step);
  b->bell.fetch_add(1);
  if (b->waiters.load() != 0) FutexWakeAll(&b->bell);
}

absl::Status ShmContext::WaitPeer(int local, Counter c, uint64_t step, const Op& op, const char* phase) {
  ControlBlock* b = block(local);
  std::atomic<uint64_t>& ctr = b->counters[c].value;
  if (ctr.load(std::memory_order_acquire) >= step) return absl::OkStatus();
  const Clock::time_point start = Clock::now();
  // Spin first: a peer a few microseconds behind costs no sleep/wake-up.
  // How long: spin_ (learns from how long the recent waits took).
  const Clock::time_point spin_until = start + spin_.window();
  do {
    for (int i = 0; i < 32; ++i) {
      if (ctr.load(std::memory_order_acquire) >= step) {
        spin_.Record(std::chrono::duration_cast<Micros>(Clock::now() - start), false);
        return absl::OkStatus();
      }
      CpuRelax();
    }
  } while (Clock::now() < spin_until);
  absl::Status st = SleepOnPeer(local, c, step, op, phase, start);
  if (st.ok()) spin_.Record(std::chrono::duration_cast<Micros>(Clock::now() - start), true);
  return st;
}

absl::Status ShmContext::SleepOnPeer(int local, Counter c, uint64_t step, const Op& op, const char* phase,
                                     Clock::time_point start) {
  ControlBlock* b = block(local);
  std::atomic<uint64_t>& ctr = b->counters[c].value;
  const Clock::time_point deadline = std::min(start + options_.timeout, deadline_);
  Clock::time_point next_check = start;
  PeerBeat& beat = beats_[static_cast<size_t>(local)];
  while (true) {
    const uint32_t bell = b->bell.load();
    if (ctr.load() >= step) return absl::OkStatus();
    if (abort_flag_.load(std::memory_order_acquire)) {
      const absl::Status why = aborted();
      return absl::Status(why.code(), absl::StrCat(op.desc, " aborted: ", std::string(why.message())));
    }
    if (b->abort_state.load(std::memory_order_acquire) != 0) {
      // The peer published its progress before it aborted or closed.
      if (ctr.load() >= step) return absl::OkStatus();
      return PeerFailure(local, op, phase, false, std::chrono::duration_cast<Millis>(Clock::now() - start));
    }
    const Clock::time_point now = Clock::now();
    if (now >= next_check) {
      next_check = now + kLivenessEvery;
      bool dead = false;
      if (heartbeat_watch_[static_cast<size_t>(local)]) {
        const uint64_t v = b->heartbeat.load(std::memory_order_acquire);
        if (v != beat.value || beat.changed == Clock::time_point{}) {
          beat.value = v;
          beat.changed = now;
        }
        dead = now - beat.changed > std::min<Millis>(kBeatStale, options_.timeout);
      } else {
        dead = CheckLiveness(ProcessIdentity{b->pid, b->start_time, b->pid_ns}) == Liveness::kDead;
      }
      if (dead && ctr.load() < step) {
        return PeerFailure(local, op, phase, false, std::chrono::duration_cast<Millis>(now - start));
      }
    }
    if (now >= deadline) return PeerFailure(local, op, phase, true, std::chrono::duration_cast<Millis>(now - start));
    b->waiters.fetch_add(1);
    if (ctr.load() < step) {
      FutexWait(&b->bell, bell, std::min<Micros>(kSleepSlice, std::chrono::duration_cast<Micros>(deadline - now)));
    }
    b->waiters.fetch_sub(1);
  }
}

absl::Status ShmContext::WaitAll(Counter c, uint64_t step, const Op& op, const char* phase) {
  for (int q = 0; q < local_size(); ++q) {
    if (q == me_) continue;
    PSYNC_RETURN_IF_ERROR(WaitPeer(q, c, step, op, phase));
  }
  return absl::OkStatus();
}

absl::Status ShmContext::PeerFailure(int local, const Op& op, const char* phase, bool timed_out,
                                     std::chrono::milliseconds waited) const {
  const ControlBlock* b = block(local);
  const std::string peer = absl::StrCat("local peer rank ", global_rank(local), " (pid ", b->pid, ")");
  const std::string me = absl::StrCat("rank ", global_rank(me_));
  // State 1 means the peer is writing its reason right now (a copy into
  // its control block): wait briefly for it rather than report an abort
  // without its cause. Bounded, in case the peer died mid-write.
  for (int i = 0; i < 1000 && b->abort_state.load(std::memory_order_acquire) == 1; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (b->abort_state.load(std::memory_order_acquire) == 2) {
    const std::string reason(b->abort_reason, strnlen(b->abort_reason, sizeof(b->abort_reason)));
    return absl::AbortedError(absl::StrCat(op.desc, " failed: ", peer, " stopped while ", me, " waited for its ",
                                           phase, ": ", reason));
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(
        op.desc, " timed out after ", internal::FormatDuration(waited), " waiting for ", peer, "'s ", phase,
        " (it is alive but never reached this collective, or is stuck)"));
  }
  if (b->abort_state.load(std::memory_order_acquire) == 1) {
    return absl::AbortedError(absl::StrCat(op.desc, " failed: ", peer, " aborted while ", me, " waited for its ", phase));
  }
  return absl::UnavailableError(absl::StrCat(op.desc, " failed: ", peer, " died (killed or exited) while ", me,
                                             " waited ", internal::FormatDuration(waited), " for its ", phase));
}

absl::Status ShmContext::CheckDescriptor(int local, const Op& op) const {
  const OpDescriptor& theirs = block(local)->descriptors[op.d.seq % kDescriptorRing];
  const OpDescriptor& mine = op.d;
  if (theirs.seq == mine.seq && theirs.kind == mine.kind && theirs.count == mine.count && theirs.root == mine.root &&
      theirs.elem_type == mine.elem_type && theirs.aux == mine.aux) {
    return absl::OkStatus();
  }
  // A peer that aborted may have stopped halfway through its sequence: its
  // abort reason is the root cause, not the mismatch.
  if (block(local)->abort_state.load(std::memory_order_acquire) != 0) {
    return PeerFailure(local, op, "next collective", false, std::chrono::milliseconds(0));
  }
  const std::string name(theirs.name, strnlen(theirs.name, sizeof(theirs.name)));
  return absl::FailedPreconditionError(absl::StrCat(
      op.desc, ": local peer rank ", global_rank(local), " issued a different collective as #", theirs.seq, ": ",
      OpKindName(theirs.kind), " '", name, "' of ", theirs.count, " elements (type ", theirs.elem_type, ", root ",
      theirs.root, "); this rank issued ", OpKindName(mine.kind), " of ", mine.count, " elements as #", mine.seq,
      ". Every rank must issue the same collectives in the same order"));
}

absl::Status ShmContext::CheckAllDescriptors(const Op& op) const {
  for (int q = 0; q < local_size(); ++q) {
    if (q == me_) continue;
    PSYNC_RETURN_IF_ERROR(CheckDescriptor(q, op));
  }
  return absl::OkStatus();
}

}  // namespace psync::comm::shm
