#include "tests/common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/common/temp_dir.h"

extern char** environ;

namespace psync::test_support {

namespace {

using Clock = std::chrono::steady_clock;

// Code of a reaped child: exit status, or -signal.
int DecodeStatus(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status); }

// Polls `pids` (entries <= 0 are done) until all are reaped or `end`; stores
// each reaped child's code and sets its pid to -1.
void ReapUntil(std::vector<pid_t>& pids, std::vector<int>& codes, Clock::time_point end) {
  int left = 0;
  for (pid_t p : pids) left += p > 0;
  while (left > 0 && Clock::now() < end) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = DecodeStatus(status);
        pids[i] = -1;
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// SIGKILL cannot be ignored: the blocking waitpid returns promptly.
void KillAndReap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

}  // namespace

std::vector<ChildResult> RunRanks(int n, const std::function<int(int)>& fn, std::chrono::milliseconds deadline) {
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  std::vector<int> codes(static_cast<size_t>(n), 0);
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
      codes[static_cast<size_t>(r)] = kForkFailed;
      continue;
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  ReapUntil(pids, codes, Clock::now() + deadline);
  for (int r = 0; r < n; ++r) {
    const pid_t p = pids[static_cast<size_t>(r)];
    if (p <= 0) continue;
    std::fprintf(stderr, "rank %d (pid %d) did not finish in time: killing it\n", r, static_cast<int>(p));
    KillAndReap(p);
    codes[static_cast<size_t>(r)] = kKilledAtDeadline;
  }
  std::vector<ChildResult> out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) out[static_cast<size_t>(r)].code = codes[static_cast<size_t>(r)];
  return out;
}

void ExpectAllRanksOk(const std::vector<ChildResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) EXPECT_EQ(results[r].code, 0) << "rank " << r;
}

SpawnResult SpawnAndCapture(const std::vector<std::string>& argv, std::chrono::milliseconds deadline) {
  SpawnResult result;
  if (argv.empty()) return result;
  TempDir dir("psync_spawn");
  const std::string out_path = dir.File("output");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  // posix_spawnp: a program name without '/' (e.g. "openssl") is looked up on PATH.
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return result;
  std::vector<pid_t> pids = {pid};
  std::vector<int> codes = {0};
  ReapUntil(pids, codes, Clock::now() + deadline);
  if (pids[0] > 0) {
    std::fprintf(stderr, "%s (pid %d) did not finish in time: killing it\n", argv[0].c_str(), static_cast<int>(pid));
    KillAndReap(pid);
    result.timed_out = true;
  } else if (codes[0] >= 0) {
    result.code = codes[0];
  }
  std::ifstream f(out_path);
  std::stringstream ss;
  ss << f.rdbuf();
  result.output = ss.str();
  return result;
}

}  // namespace psync::test_support
