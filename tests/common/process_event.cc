#include "tests/common/process_event.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

namespace psync::test_support {

ProcessEvent::ProcessEvent() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("ProcessEvent: pipe2 failed");
  read_fd_ = fds[0];
  write_fd_ = fds[1];
}

ProcessEvent::~ProcessEvent() {
  close(read_fd_);
  close(write_fd_);
}

void ProcessEvent::Notify() {
  const char byte = 1;
  // A full pipe already holds a notification: nothing is lost.
  while (write(write_fd_, &byte, 1) < 0 && errno == EINTR) {
  }
}

bool ProcessEvent::Wait(std::chrono::milliseconds timeout) {
  // The byte is never read, so the event stays set for every waiter.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{read_fd_, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
    if (n > 0) return true;
    if (n == 0 || (n < 0 && errno != EINTR)) return false;
  }
}

}  // namespace psync::test_support
