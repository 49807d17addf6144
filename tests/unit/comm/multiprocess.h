// Helpers for tests that run ranks as forked child processes. Children must
// only use fresh state (no threads from the parent survive a fork); every
// child ends with _exit so gtest's state in the child never runs.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace psync::comm::testing {

// Result of one child: exit code, or -signal when killed by a signal, or
// -1000 when it had to be killed at the deadline.
struct ChildResult {
  int code = 0;
  bool ok() const { return code == 0; }
};

// Forks `n` children running fn(rank); waits for all of them up to
// `deadline`, then SIGKILLs and reaps the rest (bounded, never hangs).
inline std::vector<ChildResult> RunRanks(int n, const std::function<int(int)>& fn,
                                         std::chrono::milliseconds deadline) {
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  std::vector<ChildResult> out(static_cast<size_t>(n));
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 99;
      try {
        rc = fn(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: uncaught exception: %s\n", r, e.what());
      } catch (...) {
        std::fprintf(stderr, "rank %d: uncaught exception\n", r);
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    if (pid < 0) {
      out[static_cast<size_t>(r)].code = -2000;
      continue;
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  const auto end = std::chrono::steady_clock::now() + deadline;
  int left = 0;
  for (pid_t p : pids) left += p > 0;
  while (left > 0 && std::chrono::steady_clock::now() < end) {
    for (int r = 0; r < n; ++r) {
      pid_t& p = pids[static_cast<size_t>(r)];
      if (p <= 0) continue;
      int status = 0;
      pid_t got = waitpid(p, &status, WNOHANG);
      if (got == p) {
        out[static_cast<size_t>(r)].code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        p = -1;
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < n; ++r) {
    pid_t p = pids[static_cast<size_t>(r)];
    if (p <= 0) continue;
    std::fprintf(stderr, "rank %d (pid %d) did not finish in time: killing it\n", r, static_cast<int>(p));
    kill(p, SIGKILL);
    int status = 0;
    waitpid(p, &status, 0);  // SIGKILL cannot be ignored: returns promptly
    out[static_cast<size_t>(r)].code = -1000;
  }
  return out;
}

// A fresh temporary directory, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "psync_comm_XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace psync::comm::testing

// Inside a child: report and fail the rank.
#define CHILD_CHECK(rank, cond, msg)                                                                   \
  do {                                                                                                 \
    if (!(cond)) {                                                                                     \
      std::fprintf(stderr, "rank %d: CHECK failed at %s:%d: %s -- %s\n", (rank), __FILE__, __LINE__, #cond, \
                   std::string(msg).c_str());                                                          \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)
