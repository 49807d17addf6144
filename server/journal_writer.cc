#include "server/journal_writer.h"

#include <utility>

#include "psync/common/logging.h"
#include "server/job_journal.h"

namespace psync::server {

JournalWriter::JournalWriter(JobState* job, std::unique_ptr<Journal> journal, std::chrono::milliseconds period)
    : job_(job), journal_(std::move(journal)), period_(period) {
  // Why the event log wakes it: events are what a user reads after a
  // restart (psyncctl watch), so they go to disk within a write's time.
  // The subscriber runs with JobState's lock held: it only sets a flag.
  subscription_ = job_->events().Subscribe([this] {
    std::lock_guard<std::mutex> l(wake_mu_);
    poked_ = true;
    cv_.notify_one();
  });
  thread_ = std::thread([this] { Run(); });
}

JournalWriter::~JournalWriter() { Stop(); }

absl::Status JournalWriter::Flush() {
  std::lock_guard<std::mutex> l(write_mu_);
  return WriteLocked();
}

void JournalWriter::Stop() {
  {
    std::lock_guard<std::mutex> l(wake_mu_);
    if (stopping_) return;
    stopping_ = true;
    cv_.notify_one();
  }
  job_->events().Unsubscribe(subscription_);
  if (thread_.joinable()) thread_.join();
  (void)Flush();  // the job's last state (e.g. FINISHED) for whoever starts next on this dir
}

void JournalWriter::Run() {
  while (true) {
    {
      std::unique_lock<std::mutex> l(wake_mu_);
      cv_.wait_for(l, period_, [this] { return poked_ || stopping_; });
      if (stopping_) return;
      poked_ = false;
    }
    std::lock_guard<std::mutex> l(write_mu_);
    absl::Status st = WriteLocked();
    // Why once per distinct error: a full disk fails every second; the job
    // goes on (the journal is what a restart would keep), the log says so once.
    if (!st.ok() && !fenced_ && st.message() != last_error_) {
      PSYNC_LOG(WARNING) << "psync-coordinator: cannot write its journal (the job goes on; a coordinator "
                            "started again would miss what came since): "
                         << st.message();
    }
    last_error_ = st.ok() ? std::string() : std::string(st.message());
  }
}

absl::Status JournalWriter::WriteLocked() {
  if (fenced_) return absl::FailedPreconditionError("a newer coordinator took the state dir");
  // Why compare bytes: a job that waits changes nothing, and a write is an fsync.
  v1::JournalState snapshot = JobJournal::Snapshot(*job_);
  std::string bytes = snapshot.SerializeAsString();
  if (bytes == last_written_) return absl::OkStatus();
  absl::Status st = journal_->Write(std::move(snapshot));
  if (st.ok()) {
    last_written_ = std::move(bytes);
  } else if (journal_->NewerEpoch() > 0) {
    fenced_ = true;  // the successor's journal is the job's now; JobState's lease check stops this coordinator
    PSYNC_LOG(WARNING) << "psync-coordinator: " << st.message();
  }
  return st;
}

}  // namespace psync::server
