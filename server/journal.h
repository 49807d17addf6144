// Journal: the coordinator's durable state dir (psync-coordinator
// --state-dir; journal.proto): what a coordinator started again needs to
// know about its job and cannot learn from the workers.
//
// Each coordinator takes an epoch above every one in the dir and writes
// only its own file, journal-<epoch>.pb (atomically, common/atomic_file.h),
// so a replaced coordinator that runs on can never overwrite its
// successor's. The newest epoch's file is the job's, and the epochs are
// the lease as well: a coordinator that finds a newer one in the dir
// (NewerEpoch) was replaced and must stop driving the job (fencing).
//
// Threads: thread-safe. lease_mu_ guards the lease cache, held only for a
// stat (JobState asks NewerEpoch under its own lock, so never behind a
// write's fsync); write_mu_ serialises Write.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/v1/journal.pb.h"
#include "server/job_config.h"

namespace psync::server {

class Journal {
 public:
  // Opens `dir` (created if missing) for a coordinator of `cfg`'s job:
  // reads the newest journal there (previous()) and takes an epoch above
  // it, at least `wanted` (the start time in ms). FailedPrecondition naming
  // both when that journal is another job id's or world size's; DataLoss
  // naming the file when it cannot be read.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir, const JobConfig& cfg, int64_t wanted);

  const std::string& dir() const { return dir_; }
  int64_t epoch() const { return epoch_; }
  // The newest journal of the coordinators before this one (nullopt: none).
  const std::optional<v1::JournalState>& previous() const { return previous_; }

  // Replaces this coordinator's file with `state` (its job, world size and
  // epoch set here); the first Write removes the older epochs' files.
  // FailedPrecondition naming the newer epoch, and nothing written, when
  // another coordinator took the dir (NewerEpoch).
  absl::Status Write(v1::JournalState state);
  // The newest epoch in the dir above this coordinator's, 0 = none. One
  // stat(2) of the dir when nothing was created there since the last call.
  int64_t NewerEpoch();

 private:
  Journal(std::string dir, const JobConfig& cfg, int64_t epoch) : dir_(std::move(dir)), cfg_(cfg), epoch_(epoch) {}
  void RemoveOlderLocked();

  const std::string dir_;
  const JobConfig cfg_;
  const int64_t epoch_;
  std::optional<v1::JournalState> previous_;

  std::mutex write_mu_;  // guards wrote_
  bool wrote_ = false;
  std::mutex lease_mu_;  // guards seen_mtime_, newer_
  timespec seen_mtime_{};  // the dir's mtime at the last listing
  int64_t newer_ = 0;
};

// "journal-<epoch>.pb": the file a coordinator of `epoch` writes in its state dir.
std::string JournalFileName(int64_t epoch);

}  // namespace psync::server
