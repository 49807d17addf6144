// LaunchDir: psync-launch's private temp folder, /tmp/psync-launch-XXXXXX:
// the coordinator's and the relay's port files, the coordinator's journal
// (state_dir()), the job's token (mode
// 0600) when the launcher made it, and the output of the last psyncctl
// status probe (status_poller.h). Removed at the end of the job.
//
// Threads: the launcher's main thread only.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace psync::launch {

class LaunchDir {
 public:
  LaunchDir() = default;
  ~LaunchDir() { Remove(); }
  LaunchDir(const LaunchDir&) = delete;
  LaunchDir& operator=(const LaunchDir&) = delete;

  // Makes the folder; Internal naming mkdtemp when it cannot.
  absl::Status Create();
  const std::string& path() const { return path_; }
  std::string port_file() const { return path_ + "/port"; }
  std::string relay_port_file() const { return path_ + "/relay_port"; }
  std::string token_file() const { return path_ + "/token"; }
  std::string status_file() const { return path_ + "/status.json"; }
  std::string status_err_file() const { return path_ + "/status.err"; }
  // The coordinator's --state-dir (its journal): one the launcher starts
  // again reads what the one before it kept.
  std::string state_dir() const { return path_ + "/coordinator"; }

  // A random token for the job (32 bytes from /dev/urandom, hex), written
  // to token_file() (mode 0600, never overwritten).
  absl::StatusOr<std::string> MakeToken();

  // Removes the files and the folder; idempotent.
  void Remove();

 private:
  std::string path_;  // empty until Create, and after Remove
};

}  // namespace psync::launch
