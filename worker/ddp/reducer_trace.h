// Per-iteration observability of the Reducer: what the runtime turns into
// Chrome trace events and summaries.
//
// All callbacks run on the backward (training) thread, inside hooks or the
// engine's end-of-backward callback: keep them short and non-blocking.
// Times are steady_clock. A bucket's `complete` time is when the backward
// thread observed the collective finished (it polls in every hook and waits
// in finalize), so it is an upper bound of the true completion time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace psync::ddp {

using TraceClock = std::chrono::steady_clock;

struct BucketTrace {
  size_t bucket = 0;
  size_t bytes = 0;
  size_t num_params = 0;
  TraceClock::time_point launch{};
  TraceClock::time_point complete{};
};

struct IterationTrace {
  int64_t iteration = 0;    // the reducer's iteration (synchronised backwards so far)
  bool synced = true;       // false for a backward inside no_sync
  TraceClock::time_point prepare{};         // PrepareForBackward (end of forward)
  TraceClock::time_point first_hook{};      // first AccumulateGrad hook of the backward
  TraceClock::time_point first_launch{};    // first bucket launched
  TraceClock::time_point last_launch{};     // last bucket launched
  TraceClock::time_point finalize_begin{};  // end-of-backward callback started
  TraceClock::time_point finalize_end{};    // gradients averaged and in place
  std::vector<size_t> launch_order;         // bucket indices in launch order (always ascending)
  std::vector<BucketTrace> buckets;         // indexed by bucket
  size_t locally_unused = 0;                // parameters that got no gradient on this rank
  size_t globally_unused = 0;               // parameters unused on every rank
  size_t skipped_buckets = 0;               // buckets not sent: unused on every rank (unused_buckets.h)
  bool rebuilt_buckets = false;             // buckets were rebuilt at the end of this iteration
};

class ReducerObserver {
 public:
  virtual ~ReducerObserver() = default;
  virtual void OnBucketLaunched(int64_t iteration, const BucketTrace& bucket) {}
  virtual void OnBucketCompleted(int64_t iteration, const BucketTrace& bucket) {}
  virtual void OnIterationFinalized(const IterationTrace& trace) {}
};

}  // namespace psync::ddp
