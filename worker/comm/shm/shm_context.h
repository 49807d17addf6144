// ShmContext: the ranks of one host, each with its workspace segment mapped
// by all of them, and the step protocol the shared-memory collectives are
// written in (see control_block.h). No threads of its own except an
// optional heartbeat; the collectives (collectives.h) run on the caller's
// thread, one at a time: the owning group's communication thread.
//
// Rendezvous (Create): every rank removes stale segments of dead processes,
// creates its own segment (name: creator identity + job tag + group +
// rank), publishes the name and a random nonce through the Store, maps
// every peer's segment and checks its nonce (a peer whose segment is not
// visible does not share our /dev/shm: a wrong host id), then, once every
// peer has mapped everything, unlinks its own name. From then on nothing of
// the group is left in /dev/shm even if every process is killed.
//
// Waiting for a peer: spin a little (how long: SpinPolicy, adaptive by
// default), then sleep on the peer's bell (futex) in short slices; between
// slices check our own abort flag, the peer's abort word, the peer's
// liveness (pid via /proc, or its heartbeat where our /proc cannot see it)
// and the timeout. So a killed peer is named within a few milliseconds,
// and a stuck one within the timeout.
//
// Threads: Abort() may come from any thread. Everything else is used by one
// thread at a time (the step/op counters are not synchronised).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/shm/control_block.h"
#include "worker/comm/shm/process_identity.h"
#include "worker/comm/shm/segment.h"
#include "worker/comm/shm/spin_policy.h"
#include "worker/comm/store.h"

namespace psync::comm::shm {

struct ShmOptions {
  // Rendezvous bound, and how long one wait for a peer's progress may take.
  std::chrono::milliseconds timeout{30000};
  // Job identity (job id, generation) for segment names: concurrent jobs on
  // one host never collide.
  std::string job_tag;
  // This group's name: store namespace and part of segment names.
  std::string prefix;
  // Workspace per rank: `slots` slots of `slot_bytes` (a multiple of 64).
  size_t slot_bytes = 1 << 20;
  int slots = 2;
  // Allreduces up to this size use the one-step symmetric algorithm.
  size_t small_bytes = 64 << 10;
  // Busy-wait this long before sleeping on a peer's bell. Unset: adaptive
  // (spin_policy.h: learnt from the recent waits, 2..200 us, none when the
  // local ranks outnumber the usable cores).
  std::optional<std::chrono::microseconds> spin;
  // The adaptive policy's core count; 0 = detect (UsableCores()).
  int usable_cores = 0;
  // Watch peers by heartbeat even where /proc could show their pid (tests).
  bool force_heartbeat = false;
};

class ShmContext {
 public:
  using Clock = std::chrono::steady_clock;

  // `members`: the global ranks of this local group, ascending; `me`: my
  // index in it. Store keys go under options.prefix. A group of one maps
  // nothing.
  static absl::StatusOr<std::shared_ptr<ShmContext>> Create(std::shared_ptr<Store> store, std::vector<int> members,
                                                            int me, ShmOptions options);
  ~ShmContext();
  ShmContext(const ShmContext&) = delete;
  ShmContext& operator=(const ShmContext&) = delete;

  int local_rank() const { return me_; }
  int local_size() const { return static_cast<int>(members_.size()); }
  int global_rank(int local) const { return members_[static_cast<size_t>(local)]; }
  const ShmOptions& options() const { return options_; }
  size_t slot_bytes() const { return options_.slot_bytes; }
  // The spin policy of this context's waits (the running op's thread only).
  const SpinPolicy& spin_policy() const { return spin_; }

  // Every wait also ends at `deadline` (DeadlineExceeded), besides the
  // per-wait timeout: set by an op that runs inline in a Work::Wait. The
  // running op's thread only.
  void set_deadline(Clock::time_point deadline) { deadline_ = deadline; }

  // Fails our waits and every peer's wait on us with `reason`. Any thread;
  // first reason wins.
  void Abort(const absl::Status& reason);
  // The local abort reason, OK when none.
  absl::Status aborted() const;

  // ---- the step protocol (communication thread only)
  struct Op {
    std::string desc;  // "allreduce 'bucket 3' (4.0 MiB) on rank 1 of 2"
    OpDescriptor d;
    uint64_t first_step = 0;  // set by its first BeginStep
  };
  // Starts a collective: assigns its sequence number.
  void BeginOp(Op& op);
  // Starts a step; returns its number once every peer is done with the
  // slot we are about to reuse. The op's first step also writes its
  // descriptor (peers read it after our kCopied of that step).
  absl::StatusOr<uint64_t> BeginStep(Op& op);
  char* Slot(int local, uint64_t step) const;
  // Publishes that this rank finished phase `c` of `step`.
  void Publish(Counter c, uint64_t step);
  // Waits until peer `local`'s counter `c` reached `step`. `phase` names
  // what we wait for in errors ("copy-in").
  absl::Status WaitPeer(int local, Counter c, uint64_t step, const Op& op, const char* phase);
  absl::Status WaitAll(Counter c, uint64_t step, const Op& op, const char* phase);
  // After WaitPeer(local, kCopied, first step of `op`): the peer issued the
  // same collective (kind, count, root), else FailedPrecondition naming both.
  absl::Status CheckDescriptor(int local, const Op& op) const;
  absl::Status CheckAllDescriptors(const Op& op) const;
  // The /dev/shm name of local rank `local`'s segment `suffix` ("" = its
  // workspace, ".b3" = its collective buffer 3): creator identity (from its
  // control block) + job tag + group + rank, so every rank can compute it.
  std::string PeerSegmentName(int local, const std::string& suffix) const;

 private:
  ShmContext(std::vector<int> members, int me, ShmOptions options);
  ControlBlock* block(int local) const { return blocks_[static_cast<size_t>(local)]; }
  std::string SegmentNameOf(const ProcessIdentity& creator, int local, const std::string& suffix) const;
  // Create's steps: our workspace segment `name` with its control block
  // filled in (returns the nonce the peers check), and mapping local peer
  // `q`'s workspace from its record under `key` (checked against what it
  // must be; sets whether its liveness is watched by heartbeat).
  absl::StatusOr<uint64_t> CreateOwnWorkspace(const ProcessIdentity& self, const std::string& name, size_t bytes);
  absl::Status MapPeer(Store& store, int q, const std::string& key, size_t bytes, const ProcessIdentity& self,
                       const std::string& where);
  // WaitPeer past its spin: sleeps on the peer's bell until its counter
  // `c` reached `step`, watching aborts, liveness and the timeouts.
  absl::Status SleepOnPeer(int local, Counter c, uint64_t step, const Op& op, const char* phase,
                           Clock::time_point start);
  absl::Status PeerFailure(int local, const Op& op, const char* phase, bool timed_out,
                           std::chrono::milliseconds waited) const;
  void HeartbeatLoop();

  const std::vector<int> members_;
  const int me_;
  const ShmOptions options_;
  ShmSegment own_;
  std::vector<ShmSegment> peers_;       // index = local rank; own slot empty
  std::vector<ControlBlock*> blocks_;   // index = local rank
  std::vector<bool> heartbeat_watch_;   // peer liveness by heartbeat (other pid namespace / forced)

  // The thread running the current op only.
  Clock::time_point deadline_ = Clock::time_point::max();
  uint64_t op_seq_ = 0;
  uint64_t step_ = 0;
  SpinPolicy spin_;
  struct PeerBeat {
    uint64_t value = 0;
    Clock::time_point changed{};
  };
  mutable std::vector<PeerBeat> beats_;

  // Abort (any thread).
  std::atomic<bool> abort_flag_{false};
  mutable std::mutex abort_mu_;
  absl::Status abort_reason_;  // guarded by abort_mu_

  // Heartbeat thread (only when some peer watches us by heartbeat).
  std::mutex beat_mu_;
  std::condition_variable beat_cv_;
  bool beat_stop_ = false;  // guarded by beat_mu_
  std::thread beat_thread_;
};

}  // namespace psync::comm::shm
