#include "bench/bench_util.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace psync::bench {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double CpuMs() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

int ForkRanks(const std::string& name, int world, std::chrono::seconds timeout,
              const std::function<int(int rank, const std::string& dir)>& run_rank) {
  char tmpl[] = "/tmp/psync_bench_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return -1;
  }
  const std::string dir = tmpl;
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  int failed = 0;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      const int rc = run_rank(r, dir);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    if (pid < 0) {
      std::perror("fork");
      failed = -1;
      break;
    }
    pids.push_back(pid);
  }
  // Bounded wait: kill ranks still running at the deadline (or all of them
  // when a fork failed: the others would wait for the missing rank).
  const auto deadline = Clock::now() + timeout;
  size_t left = pids.size();
  while (left > 0) {
    for (pid_t& p : pids) {
      if (p <= 0) continue;
      int status = 0;
      if (waitpid(p, &status, WNOHANG) == p) {
        if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && failed >= 0) ++failed;
        p = -1;
        --left;
      }
    }
    if (left == 0) break;
    if (failed < 0 || Clock::now() > deadline) {
      if (failed >= 0) {
        std::fprintf(stderr, "%s: deadline passed, killing %zu rank(s)\n", name.c_str(), left);
        failed += static_cast<int>(left);
      }
      for (pid_t p : pids) {
        if (p > 0) {
          kill(p, SIGKILL);
          waitpid(p, nullptr, 0);
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return failed;
}

}  // namespace psync::bench
