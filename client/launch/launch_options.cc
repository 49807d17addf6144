#include "client/launch/launch_options.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace psync::launch {
namespace {

// Worker flags psync-launch sets for every worker itself.
absl::Status CheckWorkerFlags(const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    for (const char* reserved : {"--rank", "--world-size", "--world_size", "--coordinator", "--local-rank",
                                 "--local_rank", "--job-id", "--job_id", "--token", "--tls-ca", "--tls_ca"}) {
      const std::string r = reserved;
      if (f == r || f.rfind(r + "=", 0) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("worker flag ", r, " is set by the launcher; use psync-launch's own flags"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLaunchOptions(const LaunchOptions& o) {
  if (o.nproc <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nproc: must be a positive number of workers (got ", o.nproc, ")"));
  }
  if (o.max_restarts < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--max-restarts: must be >= 0 (got ", o.max_restarts, ")"));
  }
  for (const std::string& a : o.coordinator_args) {
    if (a.rfind("--max-restarts", 0) == 0 || a.rfind("--max_restarts", 0) == 0) {
      return absl::InvalidArgumentError(
          "--coordinator-args: pass --max-restarts to psync-launch itself (it sets the coordinator's and "
          "restarts the workers)");
    }
  }
  if (o.port < 0 || o.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port: ", o.port, " is not a port (0 = pick a free one)"));
  }
  if (!o.tls_ca.empty() && access(o.tls_ca.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-ca: cannot read '", o.tls_ca, "': ", std::strerror(errno)));
  }
  return CheckWorkerFlags(o.worker_flags);
}

}  // namespace psync::launch
