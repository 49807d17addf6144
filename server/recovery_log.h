// RecoveryLog: what each lost rank cost the job, for the event log,
// `psyncctl status` and /metrics (docs/cli-contract.md): the time from the
// loss to the next generation's complete world (the survivors rejoined and
// a replacement joined; with --recovery=live nobody restarted), and the
// iterations the ranks had started before the loss that the next
// generation computes again (its start iteration up to the furthest one
// any rank had reported; 1 for a live recovery, up to --checkpoint-every
// for a restart from a checkpoint).
//
// Part of JobState (job_state.h), under its lock; no clock of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace psync::server {

class RecoveryLog {
 public:
  using Clock = std::chrono::steady_clock;

  // A generation ended for a lost rank at `at`; its ranks had reported up
  // to iteration `furthest` (-1 = none).
  void Lost(Clock::time_point at, int64_t furthest);
  // The next generation's world completed at `now` and starts at `start`;
  // `in_place`: some of its ranks kept their state (live recovery), else
  // every rank started afresh (a restart). Returns the note for its
  // WORLD_COMPLETE event ("" when no loss was pending: the first
  // generation, or a regroup).
  std::string Formed(Clock::time_point now, int64_t start, bool in_place);

  // Continues from what an earlier coordinator of the job counted
  // (server/job_journal.h).
  void Restore(uint64_t live, uint64_t restarted, uint64_t recomputed, double total_seconds, double last_seconds) {
    live_ = live, restarted_ = restarted, recomputed_ = recomputed;
    total_seconds_ = total_seconds, last_seconds_ = last_seconds;
  }

  uint64_t live() const { return live_; }          // recoveries with --recovery=live
  uint64_t restarted() const { return restarted_; }  // recoveries that restarted every rank
  double last_seconds() const { return last_seconds_; }  // the newest one's (0 = none yet)
  double total_seconds() const { return total_seconds_; }
  uint64_t recomputed() const { return recomputed_; }  // iterations computed again, all recoveries

 private:
  struct Pending {
    Clock::time_point at;
    int64_t furthest = -1;
  };
  std::optional<Pending> pending_;
  uint64_t live_ = 0, restarted_ = 0, recomputed_ = 0;
  double last_seconds_ = 0, total_seconds_ = 0;
};

}  // namespace psync::server
