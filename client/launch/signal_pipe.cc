#include "client/launch/signal_pipe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace psync::launch {
namespace {

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t r = write(g_signal_pipe[1], &b, 1);
  (void)r;
}

}  // namespace

absl::Status InstallSignalPipe() {
  if (pipe(g_signal_pipe) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  for (int fd : g_signal_pipe) {
    fcntl(fd, F_SETFL, O_NONBLOCK);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return absl::OkStatus();
}

std::optional<int> TakeSignal() {
  unsigned char sig = 0;
  if (g_signal_pipe[0] >= 0 && read(g_signal_pipe[0], &sig, 1) == 1) return sig;
  return std::nullopt;
}

void WaitForSignal(std::chrono::milliseconds limit) {
  struct pollfd pfd = {g_signal_pipe[0], POLLIN, 0};
  poll(&pfd, 1, static_cast<int>(limit.count()));
}

}  // namespace psync::launch
