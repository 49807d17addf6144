#include "tests/common/background_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace psync::test_support {

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv, const std::string& log_path,
                                     const std::vector<std::string>& extra_env)
    : log_(log_path) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e; ++e) env_storage.emplace_back(*e);
  for (const auto& e : extra_env) env_storage.push_back(e);
  std::vector<char*> env;
  for (auto& e : env_storage) env.push_back(e.data());
  env.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  if (posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), env.data()) == 0) pid_ = pid;
  posix_spawn_file_actions_destroy(&fa);
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0 && !reaped_) Stop();
}

std::string BackgroundProcess::Output() const {
  std::ifstream f(log_);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool BackgroundProcess::Running() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    return false;
  }
  return true;
}

bool BackgroundProcess::WaitForOutput(const std::function<bool(const std::string&)>& pred,
                                      std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (pred(Output())) return true;
    if (!Running()) return pred(Output());
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int BackgroundProcess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (Running()) {
    if (std::chrono::steady_clock::now() > deadline) return -1000;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pid_ > 0 ? code_ : -1;
}

int BackgroundProcess::Stop(std::chrono::milliseconds timeout) {
  if (!Running()) return pid_ > 0 ? code_ : -1;
  kill(pid_, SIGTERM);
  int code = Wait(timeout);
  if (code == -1000) {
    kill(pid_, SIGKILL);
    code = Wait(std::chrono::seconds(10));
  }
  return code;
}

}  // namespace psync::test_support
