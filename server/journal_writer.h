// JournalWriter: keeps a job's journal (journal.h) current. Its thread
// writes JobJournal's snapshot soon after every event (events wake it) and
// at most every `period` while only counters move; Flush writes at once,
// so a shutdown is on disk before psyncctl hears that it was scheduled.
// Once a newer coordinator took the state dir it writes no more (JobState's
// lease check then fences this coordinator: JobResume::Fenced).
//
// Threads: one thread of its own; Flush and Stop from any thread. Two
// locks, because the event log's subscriber runs under JobState's lock:
// wake_mu_ (the wake-up flags; taken under JobState's lock, never held
// while taking it) and write_mu_ (serialises the writes; held while the
// snapshot takes JobState's lock).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "server/job_state.h"
#include "server/journal.h"

namespace psync::server {

class JournalWriter {
 public:
  // `job` must outlive this (Stop before it goes).
  JournalWriter(JobState* job, std::unique_ptr<Journal> journal, std::chrono::milliseconds period);
  ~JournalWriter();
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;

  Journal& journal() { return *journal_; }
  // Writes the job's snapshot now (unless it is what was written last).
  absl::Status Flush();
  // A last Flush, then the thread ends. Idempotent.
  void Stop();

 private:
  void Run();
  absl::Status WriteLocked();

  JobState* const job_;
  const std::unique_ptr<Journal> journal_;
  const std::chrono::milliseconds period_;
  uint64_t subscription_ = 0;

  std::mutex wake_mu_;  // guards poked_, stopping_
  std::condition_variable cv_;
  bool poked_ = false, stopping_ = false;
  std::mutex write_mu_;  // guards fenced_, last_written_, last_error_
  bool fenced_ = false;
  std::string last_written_, last_error_;
  std::thread thread_;  // last: starts in the constructor, after the rest
};

}  // namespace psync::server
