#include "client/launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace psync::launch {

using Clock = std::chrono::steady_clock;

pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env_add, int stdout_fd,
            int stderr_fd) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setpgid(0, 0);
    // Why: children sit in their own process group (so a terminal's ^C
    // reaches only the launcher, which stops them in order), so nothing
    // else would stop them if the launcher is killed outright (SIGKILL, a
    // test's timeout): they get SIGTERM when it dies. Spawn runs on the
    // launcher's main thread, which lives as long as the launcher.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) _exit(127);  // it died before prctl took effect
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    if (stdout_fd >= 0) dup2(stdout_fd, STDOUT_FILENO);
    if (stderr_fd >= 0) dup2(stderr_fd, STDERR_FILENO);
    for (const std::string& kv : env_add) {
      size_t eq = kv.find('=');
      setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
    }
    execv(args[0], args.data());
    std::fprintf(stderr, "psync-launch: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so there is no race with a signal
  return pid;
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return "unknown status";
}

bool Reap(const std::vector<Child*>& all, int64_t round) {
  bool changed = false;
  for (Child* c : all) {
    if (!c->running) continue;
    int st = 0;
    pid_t r = waitpid(c->pid, &st, WNOHANG);
    if (r == c->pid) {
      c->running = false;
      c->status = st;
      c->exit_code = DecodeStatus(st);
      c->reaped_at = round;
      changed = true;
    }
  }
  return changed;
}

void SignalAll(const std::vector<Child*>& children, int sig) {
  for (Child* c : children) {
    if (c->running) kill(-c->pid, sig);  // its whole process group
  }
}

bool WaitAll(const std::vector<Child*>& children, std::chrono::milliseconds limit) {
  auto deadline = Clock::now() + limit;
  while (true) {
    Reap(children);
    bool any = std::any_of(children.begin(), children.end(), [](Child* c) { return c->running; });
    if (!any) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void StopAll(const std::vector<Child*>& children, std::chrono::milliseconds term_wait) {
  SignalAll(children, SIGTERM);
  if (WaitAll(children, term_wait)) return;
  SignalAll(children, SIGKILL);
  WaitAll(children, std::chrono::milliseconds(5000));
}

int RunBounded(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
               std::chrono::milliseconds limit) {
  int devnull = open("/dev/null", O_WRONLY);
  pid_t pid = Spawn(argv, env_add, devnull);
  if (devnull >= 0) close(devnull);
  if (pid < 0) return -1;
  Child c{"psyncctl", pid, true};
  std::vector<Child*> v = {&c};
  if (!WaitAll(v, limit)) {
    StopAll(v, std::chrono::milliseconds(1000));
    return -1;
  }
  return c.exit_code;
}

}  // namespace psync::launch
