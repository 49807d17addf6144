// BackgroundProcess: a program a test starts and talks to while it runs (a
// coordinator binary, say), with stdout and stderr going to a file the test
// can read or wait on. Always bounded: the destructor sends SIGTERM, waits up
// to 5 s, then SIGKILLs and reaps it. Started with posix_spawnp (safe in a
// process that runs gRPC).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace psync::test_support {

class BackgroundProcess {
 public:
  // Starts argv (argv[0] a path or a name on PATH) with extra environment
  // entries ("NAME=value") on top of this process's; output goes to `log_path`.
  BackgroundProcess(const std::vector<std::string>& argv, const std::string& log_path,
                    const std::vector<std::string>& extra_env = {});
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Everything the process wrote so far.
  std::string Output() const;
  // Polls (every 10 ms, up to `timeout`) until `pred(Output())` holds;
  // false on timeout or when the process exited first (and pred still fails).
  bool WaitForOutput(const std::function<bool(const std::string&)>& pred,
                     std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Waits up to `timeout` for the process to exit; its exit code, -signal
  // when killed, or -1000 if still running at the timeout.
  int Wait(std::chrono::milliseconds timeout);
  // SIGTERM, then Wait(timeout), then SIGKILL if needed; the exit code as Wait.
  int Stop(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  bool Running();

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int code_ = 0;
  std::string log_;
};

}  // namespace psync::test_support
