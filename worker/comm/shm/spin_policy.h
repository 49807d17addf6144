// SpinPolicy: how long a rank busy-waits for a peer's progress before it
// sleeps on the peer's futex bell (ShmContext::WaitPeer).
//
// Spinning costs CPU for as long as it lasts; sleeping costs a wake-up (the
// publisher's FUTEX_WAKE, then the scheduler: tens of microseconds on a VM,
// more on a busy host) on top of the wait. A fixed window is wrong both
// ways: too short and every wait a little longer than it pays the wake-up
// (small buckets' median latency); too long and every wait for a peer that
// is far behind (still in backward) burns the whole window.
//
// Adaptive: each context keeps a decayed histogram of its recent waits
// (log2 buckets of microseconds, each new wait weighs 1, older ones fade by
// 1/32 per wait) and picks the window W among {min, powers of two, max}
// that minimises the expected cost per wait, where a wait of w costs
//   caught (w <= W):   cpu_weight * w            (spun until the peer came)
//   missed (w >  W):   wake_cost + cpu_weight * W (spun in vain, then slept)
// (the wait itself is the same either way and drops out). With the
// defaults (wake cost 50 us, CPU at half the weight of latency) a context
// whose peers typically arrive within ~100 us spins just past that, and one
// whose peers are typically far behind spins only `min` and sleeps. A wait
// that went to sleep was measured with the wake-up in it: it is recorded as
// max(2 W, waited - wake_cost), so a short window does not talk itself into
// staying short (misses double it until it catches the peer, or until
// catching would cost more than the wake-up).
//
// Never spins when the ranks sharing this host outnumber its usable cores
// (a spinning rank would hold the core the peer it waits for needs). A
// fixed window (ShmOptions::spin, GroupOptions::shm_spin_us, env
// PSYNC_SHM_SPIN_US) is used as given.
//
// Pure: no clock, no I/O; deterministic for a sequence of Record calls.
// One thread at a time (the context's communication thread).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace psync::comm::shm {

struct SpinPolicyConfig {
  std::chrono::microseconds min{2};
  std::chrono::microseconds max{200};
  // The window until `warmup` waits were recorded (the former fixed value).
  std::chrono::microseconds initial{50};
  int warmup = 8;
  // The latency a futex sleep adds to a wait (wake-up + scheduling).
  double wake_cost_us = 50;
  // Weight of one microsecond of spinning CPU against one of latency.
  double cpu_weight = 0.5;
  // Each recorded wait multiplies the older ones' weight by (1 - decay).
  double decay = 1.0 / 32;
  // The window is recomputed every this many recorded waits.
  int recompute_every = 8;
};

class SpinPolicy {
 public:
  static constexpr int kBuckets = 17;  // [0,1) us, [1,2), [2,4), ... [16384,32768), >= 32768

  // Always `window` (a user's choice).
  static SpinPolicy Fixed(std::chrono::microseconds window);
  // Learns the window from the waits; never spins when local_ranks >
  // usable_cores (usable_cores <= 0: unknown, spinning allowed).
  static SpinPolicy Adaptive(int usable_cores, int local_ranks, SpinPolicyConfig config = {});

  // How long the next wait spins before it sleeps.
  std::chrono::microseconds window() const { return window_; }
  // A wait that did not end at once: `waited` from its start until the
  // peer's progress was seen; `slept`: it outlasted window() and slept.
  void Record(std::chrono::microseconds waited, bool slept);

  bool adaptive() const { return adaptive_; }
  bool may_spin() const { return may_spin_; }
  int64_t recorded() const { return recorded_; }
  // The decayed weight of the recent waits per bucket (BucketOf).
  const std::array<double, kBuckets>& histogram() const { return hist_; }
  // "fixed 50 us", "adaptive 2..200 us (now 16 us, 40 waits)",
  // "off: 4 local ranks on 2 usable cores".
  std::string Describe() const;

  // The bucket of a wait of `us` microseconds, and the wait it stands for.
  static int BucketOf(double us);
  static double BucketValue(int bucket);

 private:
  SpinPolicy() = default;
  void Recompute();

  bool adaptive_ = false;
  bool may_spin_ = true;
  int cores_ = 0, local_ranks_ = 0;
  SpinPolicyConfig cfg_;
  std::chrono::microseconds window_{0};
  std::array<double, kBuckets> hist_{};
  int64_t recorded_ = 0;
};

// CPUs this process may run on: its affinity mask, capped by a cgroup v2
// CPU quota (/sys/fs/cgroup/cpu.max, rounded up) when there is one; 0 when
// unknown.
int UsableCores();

// A fixed spin window from the text of PSYNC_SHM_SPIN_US: microseconds,
// 0..1000000 (0 = never spin); nullptr or "" = unset (nullopt); anything
// else is InvalidArgument naming the variable and the value.
absl::StatusOr<std::optional<std::chrono::microseconds>> ParseSpinUs(const char* text);
// ParseSpinUs(getenv("PSYNC_SHM_SPIN_US")).
absl::StatusOr<std::optional<std::chrono::microseconds>> SpinFromEnv();
// The ShmOptions::spin for GroupOptions::shm_spin_us: >= 0 that fixed
// window; < 0 PSYNC_SHM_SPIN_US when set, else nullopt (adaptive).
absl::StatusOr<std::optional<std::chrono::microseconds>> ResolveSpin(int64_t shm_spin_us);

}  // namespace psync::comm::shm
