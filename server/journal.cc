#include "server/journal.h"

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"

namespace psync::server {
namespace {

constexpr absl::string_view kPrefix = "journal-";
constexpr absl::string_view kSuffix = ".pb";

// The epoch of a journal file's name ("journal-<epoch>.pb", or its
// temporary "journal-<epoch>.pb.tmp.XXXXXX" when `tmp_too`); 0 = not one.
int64_t EpochOf(absl::string_view name, bool tmp_too) {
  if (!absl::ConsumePrefix(&name, kPrefix)) return 0;
  const size_t dot = name.find('.');
  if (dot == absl::string_view::npos) return 0;
  absl::string_view rest = name.substr(dot);
  if (rest != kSuffix && !(tmp_too && absl::StartsWith(rest, ".pb.tmp."))) return 0;
  int64_t epoch = 0;
  if (!absl::SimpleAtoi(name.substr(0, dot), &epoch) || epoch <= 0) return 0;
  return epoch;
}

// The epochs of the journal files in `dir` (and their temporaries with `tmp_too`).
absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> ListJournals(const std::string& dir, bool tmp_too) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::UnavailableError(absl::StrCat("--state-dir ", dir, ": cannot list it: ", std::strerror(errno)));
  }
  std::vector<std::pair<int64_t, std::string>> out;
  while (const dirent* e = ::readdir(d)) {
    if (int64_t epoch = EpochOf(e->d_name, tmp_too); epoch > 0) out.emplace_back(epoch, e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

absl::Status MakeDir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("--state-dir ", dir, " exists and is not a directory"));
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("--state-dir ", dir, ": cannot create it: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JournalState> ReadJournal(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream bytes;
  if (!f || !(bytes << f.rdbuf())) {
    return absl::DataLossError(absl::StrCat("cannot read the coordinator journal ", path));
  }
  v1::JournalState state;
  if (!state.ParseFromString(bytes.str()) || state.job_id().empty() || state.epoch() <= 0) {
    return absl::DataLossError(absl::StrCat("the coordinator journal ", path,
                                            " is corrupt; move it away to start this job's coordinator without it "
                                            "(its restart count, events and counters are then unknown)"));
  }
  return state;
}

bool SameTime(const timespec& a, const timespec& b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

}  // namespace

std::string JournalFileName(int64_t epoch) { return absl::StrCat(kPrefix, epoch, kSuffix); }

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& dir, const JobConfig& cfg, int64_t wanted) {
  if (dir.empty()) return absl::InvalidArgumentError("--state-dir must not be empty");
  if (absl::Status st = MakeDir(dir); !st.ok()) return st;
  absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> files = ListJournals(dir, false);
  if (!files.ok()) return files.status();
  std::optional<v1::JournalState> previous;
  int64_t newest = 0;
  if (!files->empty()) {
    newest = files->back().first;
    absl::StatusOr<v1::JournalState> read = ReadJournal(absl::StrCat(dir, "/", files->back().second));
    if (!read.ok()) return read.status();
    if (read->job_id() != cfg.job_id || read->world_size() != cfg.world_size) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--state-dir ", dir, " holds job '", read->job_id(), "' of world size ", read->world_size(),
          " (epoch ", read->epoch(), "), not job '", cfg.job_id, "' of world size ", cfg.world_size,
          ": give this job a state dir of its own, or start the coordinator with that job's flags"));
    }
    previous = std::move(*read);
  }
  // Why above the newest file's epoch, not only the clock: a clock stepped
  // back must still give the successor the higher epoch.
  std::unique_ptr<Journal> j(new Journal(dir, cfg, std::max(wanted, newest + 1)));
  j->previous_ = std::move(previous);
  return j;
}

int64_t Journal::NewerEpoch() {
  std::lock_guard<std::mutex> l(lease_mu_);
  if (newer_ > 0) return newer_;  // once replaced, always replaced
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) return 0;  // the dir gone: nobody took it over through it
  // Why not trust an mtime of the last second: a file created in the same
  // coarse clock tick as the last look leaves the mtime as it was.
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  if (SameTime(st.st_mtim, seen_mtime_) && now.tv_sec > st.st_mtim.tv_sec + 1) return 0;
  seen_mtime_ = st.st_mtim;
  absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> files = ListJournals(dir_, false);
  if (files.ok() && !files->empty() && files->back().first > epoch_) newer_ = files->back().first;
  return newer_;
}

absl::Status Journal::Write(v1::JournalState state) {
  std::lock_guard<std::mutex> l(write_mu_);
  state.set_job_id(cfg_.job_id);
  state.set_world_size(cfg_.world_size);
  state.set_epoch(epoch_);
  const auto fenced = [&]() -> absl::Status {
    if (int64_t newer = NewerEpoch(); newer > 0) {
      return absl::FailedPreconditionError(absl::StrCat("coordinator epoch ", newer, " took over --state-dir ", dir_,
                                                        " from this coordinator (epoch ", epoch_, ")"));
    }
    return absl::OkStatus();
  };
  if (absl::Status st = fenced(); !st.ok()) return st;
  AtomicFileWriter w;
  if (absl::Status st = w.Open(absl::StrCat(dir_, "/", JournalFileName(epoch_))); !st.ok()) return st;
  if (absl::Status st = w.Append(state.SerializeAsString()); !st.ok()) return st;
  // Why check again right before the rename: a successor that took the dir
  // while this one wrote must not find a journal newer than its own view.
  if (absl::Status st = w.Commit(fenced); !st.ok()) return st;
  if (!wrote_) RemoveOlderLocked();
  wrote_ = true;
  return absl::OkStatus();
}

void Journal::RemoveOlderLocked() {
  // Why only after this coordinator's own file is on disk: until then the
  // older journal is the only one there is.
  absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> files = ListJournals(dir_, true);
  if (!files.ok()) return;
  for (const auto& [epoch, name] : *files) {
    if (epoch < epoch_) ::unlink(absl::StrCat(dir_, "/", name).c_str());
  }
}

}  // namespace psync::server
