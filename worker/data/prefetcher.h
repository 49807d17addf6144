// Prefetcher: prepares the next step's micro-batches (all M of them) on a
// background thread while the training thread trains on this step's.
//
//   data::Prefetcher prefetch(*data.train, {rank, world, M, B, first_step, end_step});
//   for (...) { PSYNC_ASSIGN_OR_RETURN(data::StepBatches sb, prefetch.Next()); ... }
//
// Bounded to one step ahead: the thread prepares step s+1 only once the
// trainer has taken step s, so at most one prepared step waits (memory:
// one step's batches). A dataset error is returned by Next() with its
// message (and again by every later call); steps after it are not prepared.
// Stopping early is safe: Stop() or the destructor wakes the thread and
// joins it (at most the one Get in progress finishes first).
//
// Threads: Next() and Stop() from the training thread. The prefetch thread
// only calls Dataset::Get (const, thread-safe). mu_ guards slot_, done_,
// stop_ and error_.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace psync::data {

struct StepBatches {
  int64_t step = 0;
  std::vector<Batch> micro;  // micro-batch m = micro[m], m < accumulate
};

class Prefetcher {
 public:
  struct Options {
    int rank = 0;
    int world_size = 1;
    int64_t accumulate = 1;    // M
    int64_t global_batch = 0;  // B
    int64_t first_step = 0;    // the first step Next() returns (a resumed run starts later)
    int64_t end_step = -1;     // one past the last step; -1: no end
  };

  // Starts the thread, which begins preparing first_step at once. `data`
  // must outlive the Prefetcher.
  Prefetcher(const Dataset& data, Options options);
  ~Prefetcher();  // Stop()
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next step's micro-batches, in step order; blocks until they are
  // ready. Errors: the dataset's (sticky); OutOfRange past end_step;
  // Cancelled after Stop().
  absl::StatusOr<StepBatches> Next();
  // Stops and joins the thread; idempotent.
  void Stop();

 private:
  void Run();  // the prefetch thread
  absl::StatusOr<StepBatches> Prepare(int64_t step) const;

  const Dataset& data_;
  const Options opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<absl::StatusOr<StepBatches>> slot_;  // the prepared step, not yet taken
  bool done_ = false;                                // the thread prepared its last step (end or error)
  bool stop_ = false;                                // Stop() was called
  absl::Status error_;                               // the first error Next() returned
  std::thread thread_;                               // last: starts after the state above exists
};

}  // namespace psync::data
