#include "worker/comm/shm/spin_policy.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace psync::comm::shm {

using Micros = std::chrono::microseconds;

SpinPolicy SpinPolicy::Fixed(Micros window) {
  SpinPolicy p;
  p.adaptive_ = false;
  p.window_ = std::max(window, Micros{0});
  return p;
}

SpinPolicy SpinPolicy::Adaptive(int usable_cores, int local_ranks, SpinPolicyConfig config) {
  SpinPolicy p;
  p.adaptive_ = true;
  p.cores_ = usable_cores;
  p.local_ranks_ = local_ranks;
  config.min = std::max(config.min, Micros{0});
  config.max = std::max(config.max, config.min);
  config.initial = std::clamp(config.initial, config.min, config.max);
  config.warmup = std::max(config.warmup, 0);
  config.recompute_every = std::max(config.recompute_every, 1);
  config.decay = std::clamp(config.decay, 0.0, 1.0);
  p.cfg_ = config;
  // Why: with more ranks than cores, a spinning rank may hold the very core
  // the peer it waits for needs to make progress.
  p.may_spin_ = usable_cores <= 0 || local_ranks <= usable_cores;
  p.window_ = p.may_spin_ ? config.initial : Micros{0};
  return p;
}

int SpinPolicy::BucketOf(double us) {
  if (!(us >= 1)) return 0;  // also NaN
  const int b = 1 + static_cast<int>(std::floor(std::log2(us)));
  return std::min(b, kBuckets - 1);
}

double SpinPolicy::BucketValue(int bucket) {
  if (bucket <= 0) return 0.5;
  // The middle of [2^(b-1), 2^b); the last bucket is open: 1.5x its floor.
  return 0.75 * std::ldexp(1.0, bucket);
}

void SpinPolicy::Record(Micros waited, bool slept) {
  if (!adaptive_ || !may_spin_) return;
  double us = static_cast<double>(waited.count());
  // Why: a wait that slept includes the wake-up, which is not the peer's
  // lateness; left in, a short window would make the waits look long and
  // keep itself short. But the peer came later than the window, and the
  // real wake-up may be shorter than wake_cost_us: counted at least twice
  // the window, misses push the window up (doubling) until it catches the
  // peer or catching costs more than the wake-up.
  if (slept) us = std::max(2.0 * static_cast<double>(window_.count()), us - cfg_.wake_cost_us);
  for (double& h : hist_) h *= 1 - cfg_.decay;
  hist_[static_cast<size_t>(BucketOf(us))] += 1;
  ++recorded_;
  if (recorded_ >= cfg_.warmup && (recorded_ - cfg_.warmup) % cfg_.recompute_every == 0) Recompute();
}

void SpinPolicy::Recompute() {
  // Candidates: min, every power of two between, max.
  const double lo = static_cast<double>(cfg_.min.count()), hi = static_cast<double>(cfg_.max.count());
  double best_w = lo, best_cost = std::numeric_limits<double>::infinity();
  auto consider = [&](double w) {
    double cost = 0;
    for (int b = 0; b < kBuckets; ++b) {
      const double h = hist_[static_cast<size_t>(b)];
      if (h == 0) continue;
      const double v = BucketValue(b);
      cost += h * (v <= w ? cfg_.cpu_weight * v : cfg_.wake_cost_us + cfg_.cpu_weight * w);
    }
    if (cost < best_cost) {  // ties: the shorter window
      best_cost = cost;
      best_w = w;
    }
  };
  consider(lo);
  for (double w = 1; w < hi; w *= 2) {
    if (w > lo) consider(w);
  }
  consider(hi);
  window_ = Micros{static_cast<int64_t>(best_w)};
}

std::string SpinPolicy::Describe() const {
  if (!adaptive_) return absl::StrCat("fixed ", window_.count(), " us");
  if (!may_spin_) return absl::StrCat("off: ", local_ranks_, " local ranks on ", cores_, " usable cores");
  return absl::StrCat("adaptive ", cfg_.min.count(), "..", cfg_.max.count(), " us (now ", window_.count(), " us, ",
                      recorded_, " waits)");
}

namespace {

// cgroup v2 "cpu.max": "max 100000" (no quota) or "QUOTA PERIOD".
int CgroupCpuLimit() {
  std::ifstream f("/sys/fs/cgroup/cpu.max");
  std::string quota, period;
  if (!(f >> quota >> period) || quota == "max") return 0;
  int64_t q = 0, p = 0;
  if (!absl::SimpleAtoi(quota, &q) || !absl::SimpleAtoi(period, &p) || q <= 0 || p <= 0) return 0;
  return static_cast<int>((q + p - 1) / p);
}

}  // namespace

int UsableCores() {
  int cores = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  const int limit = CgroupCpuLimit();
  if (limit > 0 && (cores == 0 || limit < cores)) cores = limit;
  return cores;
}

absl::StatusOr<std::optional<Micros>> ParseSpinUs(const char* text) {
  if (text == nullptr || *text == '\0') return std::optional<Micros>();
  int64_t us = 0;
  if (!absl::SimpleAtoi(text, &us) || us < 0 || us > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("PSYNC_SHM_SPIN_US='", text,
                                                   "': expected microseconds 0..1000000 (0 = never spin; unset = "
                                                   "adaptive)"));
  }
  return std::optional<Micros>(Micros{us});
}

absl::StatusOr<std::optional<Micros>> SpinFromEnv() { return ParseSpinUs(std::getenv("PSYNC_SHM_SPIN_US")); }

absl::StatusOr<std::optional<Micros>> ResolveSpin(int64_t shm_spin_us) {
  if (shm_spin_us >= 0) return std::optional<Micros>(Micros{shm_spin_us});
  return SpinFromEnv();
}

}  // namespace psync::comm::shm
