#include "client/launch/status_poller.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace psync::launch {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

}  // namespace

StatusPoller::StatusPoller(Command status, std::string out_file, std::string err_file)
    : status_(std::move(status)), out_file_(std::move(out_file)), err_file_(std::move(err_file)) {}

StatusPoller::~StatusPoller() {
  if (probe_.running) StopAll({&probe_}, std::chrono::milliseconds(0));
}

std::optional<absl::StatusOr<CoordinatorView>> StatusPoller::Tick(std::chrono::milliseconds every) {
  std::optional<absl::StatusOr<CoordinatorView>> answer;
  if (probe_.running && Reap({&probe_})) answer = Collect();
  if (probe_.running || (last_start_ && Clock::now() - *last_start_ < every)) return answer;
  const int out = open(out_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int err = open(err_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  probe_.pid = out >= 0 && err >= 0 ? Spawn(status_.argv, status_.env, out, err) : -1;
  probe_.running = probe_.pid > 0;
  if (out >= 0) close(out);
  if (err >= 0) close(err);
  last_start_ = Clock::now();
  if (!probe_.running && !answer) {
    answer = absl::InternalError(absl::StrCat("cannot run ", status_.argv[0], " (fork or ", out_file_, ")"));
  }
  return answer;
}

absl::StatusOr<CoordinatorView> StatusPoller::Collect() const {
  if (probe_.exit_code == 0) return ParseStatusJson(ReadAll(out_file_));
  std::string err(absl::StripAsciiWhitespace(ReadAll(err_file_)));
  if (absl::StartsWith(err, "psyncctl: ")) err = err.substr(10);
  if (err.empty()) err = absl::StrCat("psyncctl status: ", DescribeStatus(probe_.status));
  // psyncctl's wording for UNAVAILABLE / DEADLINE_EXCEEDED / no connection
  // (client/psyncctl.cc RpcFail): the coordinator may just not be up yet.
  if (absl::StrContains(err, "cannot reach coordinator")) return absl::UnavailableError(err);
  return absl::FailedPreconditionError(err);
}

}  // namespace psync::launch
