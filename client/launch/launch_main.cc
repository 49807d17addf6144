// psync-launch: a coordinator plus N local workers, like torchrun --standalone.
//
//   psync-launch --nproc=N [--port=0] [--job-id=psync] [--token=T] -- [worker flags]
//
// Starts psync-coordinator (found next to this binary, in the build tree, or
// on PATH) on 127.0.0.1, waits for its port file, then starts N psync-workers
// with --rank/--world-size/--coordinator set (and the torchrun environment:
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), passing the worker
// flags to each. Rank 0's stdout (progress) is shown; other ranks' stdout is
// dropped; every stderr is shown. Children run in their own process group, so
// a terminal Ctrl-C reaches only the launcher, which then stops the job
// through the coordinator's Shutdown RPC (psyncctl shutdown): every worker
// stops after the same iteration and exits 0. A second Ctrl-C (or workers
// that don't stop in time) sends SIGTERM, then SIGKILL. The launcher never
// starts gRPC itself (it forks), so it talks to the coordinator via psyncctl.
//
// Plan relay (--relay, default on with --nproc > 1): the launcher also starts
// psync-relay (client/relay/README.md) and gives the workers
// --plan-relay=127.0.0.1:PORT, so the host's ranks share one Train stream to
// the coordinator (one report message and one plan per iteration for the
// host). Its exit while workers run stops the job like the coordinator's.
//
// Token: without --token / PSYNC_TOKEN the launcher makes a random one for
// the job (so nobody else on the machine, or on the network with
// --host=0.0.0.0, can stop the job or touch its rendezvous keys) and passes
// it to every child in the environment; it is also written (mode 0600) to
// <tmpdir>/token, printed at start, for your own psyncctl calls.
//
// Restarts (--max-restarts=N, like torchrun's): when a worker fails (exits
// non-zero, or is killed), the launcher names it in one line, stops the other
// workers of that generation (SIGTERM, then SIGKILL) and starts all N again
// with the same flags (plus --resume when they name a --checkpoint-dir) and
// PSYNC_RESTART_COUNT set, up to N times. The coordinator keeps running
// (started with --max-restarts=N) and takes the world back as its next
// generation. Exit 2 (bad flags or input) is not restarted; nor is anything
// after a Ctrl-C. Decisions: restart_policy.h; processes: child_process.h.
//
// Exit status: the worst of the final generation's exit codes (0
// done/stopped, 1 internal, 2 bad flags, 3 rendezvous, 4 peer lost, 5
// coordinator lost; a worker killed by a signal counts as 128+signal), or the
// launcher's own: 2 for bad flags, 3 when the coordinator (or the relay) does not start.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/launch/child_process.h"
#include "client/launch/restart_policy.h"
#include "common/flags.h"

ABSL_FLAG(int, nproc, 0, "number of local workers (required)");
ABSL_FLAG(int, port, 0, "coordinator port (0 = pick a free one)");
ABSL_FLAG(std::string, host, "127.0.0.1", "address the coordinator binds to and workers connect to");
ABSL_FLAG(std::string, job_id, "psync", "job id");
ABSL_FLAG(std::string, token, "", "shared secret (env PSYNC_TOKEN; default: a random one for this job)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA / certificate the workers and psyncctl trust: connect over TLS (env PSYNC_TLS_CA; "
          "serve TLS with --coordinator-args='--tls-cert=C --tls-key=K')");
ABSL_FLAG(std::string, coordinator_bin, "", "path of psync-coordinator (default: found next to psync-launch)");
ABSL_FLAG(std::string, worker_bin, "", "path of psync-worker (default: found next to psync-launch)");
ABSL_FLAG(std::string, psyncctl_bin, "", "path of psyncctl (default: found next to psync-launch)");
ABSL_FLAG(std::string, coordinator_args, "", "extra flags for psync-coordinator, space separated");
ABSL_FLAG(absl::Duration, grace, absl::Seconds(30),
          "after a stop request or a failed worker: how long workers get to exit before SIGTERM");
ABSL_FLAG(bool, relay, true,
          "with --nproc > 1: run psync-relay, so this host's workers reach the coordinator on one Train stream "
          "(one report message and one plan per host per iteration); --relay=false: one stream per worker");
ABSL_FLAG(std::string, relay_bin, "", "path of psync-relay (default: found next to psync-launch)");
ABSL_FLAG(bool, all_output, false, "show every rank's stdout, not only rank 0's");
ABSL_FLAG(int, max_restarts, 0,
          "when a worker fails (exit != 0 but 2, or killed), stop the others and start every worker again, at "
          "most this many times (the coordinator runs with --max-restarts and takes the world back as its next "
          "generation; workers get --resume when they have a --checkpoint-dir); 0 = a failed worker ends the job");

namespace {

using Clock = std::chrono::steady_clock;
using psync::launch::Child;
using psync::launch::DescribeStatus;
using psync::launch::Reap;
using psync::launch::RunBounded;
using psync::launch::SignalAll;
using psync::launch::Spawn;
using psync::launch::StopAll;

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t r = write(g_signal_pipe[1], &b, 1);
  (void)r;
}

// How waiting for a child's port file ended.
enum class PortWait { kListening, kExited, kInterrupted, kTimedOut };

// Waits up to 30 s for `child` (the coordinator or the relay) to write a
// positive port number into `port_file` (*port), watching for its exit and
// for a stop signal (the signal pipe) meanwhile.
PortWait WaitForPortFile(const std::string& port_file, Child& child, int* port) {
  const std::vector<Child*> only = {&child};
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (true) {
    std::ifstream f(port_file);
    if (f >> *port && *port > 0) return PortWait::kListening;
    *port = 0;
    Reap(only);
    unsigned char sig;
    if (read(g_signal_pipe[0], &sig, 1) == 1) return PortWait::kInterrupted;
    if (!child.running) return PortWait::kExited;
    if (Clock::now() >= deadline) return PortWait::kTimedOut;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string SelfDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

bool IsExecutable(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

// `name` next to this binary, then in the build tree (this binary lives in
// <build>/client/launch/), then on PATH.
std::optional<std::string> FindBinary(const std::string& name, const std::vector<std::string>& build_rel) {
  const std::string dir = SelfDir();
  std::vector<std::string> candidates = {dir + "/" + name};
  for (const std::string& rel : build_rel) candidates.push_back(dir + "/../../" + rel + "/" + name);
  for (const std::string& c : candidates) {
    if (IsExecutable(c)) return c;
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string d;
    while (std::getline(ss, d, ':')) {
      if (!d.empty() && IsExecutable(d + "/" + name)) return d + "/" + name;
    }
  }
  return std::nullopt;
}

// 32 random bytes from the kernel, as hex; empty if /dev/urandom fails.
std::string RandomToken() {
  unsigned char buf[32];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  size_t got = 0;
  while (got < sizeof(buf)) {
    ssize_t n = read(fd, buf + got, sizeof(buf) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got != sizeof(buf)) return "";
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : buf) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::vector<std::string> SplitSpaces(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // The coordinator and the workers write to this same stderr. std::cerr is
  // unbuffered, so "a << b << c" would be several write(2)s and a child's log
  // line could land inside one of ours (seen: the address line torn by the
  // coordinator's first line). Line-buffered, each line is one write.
  std::setvbuf(stderr, nullptr, _IOLBF, 1 << 16);
  std::cerr << std::nounitbuf;
  static const std::set<std::string> kFlags = {"nproc", "port", "host", "job_id", "token", "tls_ca", "coordinator_bin",
                                                "worker_bin", "psyncctl_bin", "coordinator_args", "grace",
                                                "all_output", "max_restarts", "relay", "relay_bin"};
  absl::StatusOr<psync::ParsedArgs> parsed =
      psync::ParseFlagsStrict(argc, argv, kFlags, /*stop_at_dashes=*/true);
  if (!parsed.ok()) {
    std::cerr << "psync-launch: " << parsed.status().message() << "\n";
    return 2;
  }
  if (parsed->help) {
    std::cout << "usage: psync-launch --nproc=N [--port=0] [--job-id=psync] [--token=T] -- [worker flags]\n"
              << psync::FlagsHelp(kFlags);
    return 0;
  }
  if (!parsed->positional.empty()) {
    std::cerr << "psync-launch: unexpected argument '" << parsed->positional.front()
              << "' (worker flags go after a bare --)\n";
    return 2;
  }
  const int nproc = absl::GetFlag(FLAGS_nproc);
  if (nproc <= 0) {
    std::cerr << "psync-launch: --nproc: must be a positive number of workers (got " << nproc << ")\n";
    return 2;
  }
  const int max_restarts = absl::GetFlag(FLAGS_max_restarts);
  if (max_restarts < 0) {
    std::cerr << "psync-launch: --max-restarts: must be >= 0 (got " << max_restarts << ")\n";
    return 2;
  }
  for (const std::string& a : SplitSpaces(absl::GetFlag(FLAGS_coordinator_args))) {
    if (a.rfind("--max-restarts", 0) == 0 || a.rfind("--max_restarts", 0) == 0) {
      std::cerr << "psync-launch: --coordinator-args: pass --max-restarts to psync-launch itself (it sets the "
                   "coordinator's and restarts the workers)\n";
      return 2;
    }
  }
  const int port_flag = absl::GetFlag(FLAGS_port);
  if (port_flag < 0 || port_flag > 65535) {
    std::cerr << "psync-launch: --port: " << port_flag << " is not a port (0 = pick a free one)\n";
    return 2;
  }
  std::string token = absl::GetFlag(FLAGS_token);
  if (parsed->specified.count("token") == 0 && std::getenv("PSYNC_TOKEN")) token = std::getenv("PSYNC_TOKEN");
  std::string tls_ca = absl::GetFlag(FLAGS_tls_ca);
  if (!parsed->given("tls_ca") && std::getenv("PSYNC_TLS_CA")) tls_ca = std::getenv("PSYNC_TLS_CA");
  if (!tls_ca.empty() && access(tls_ca.c_str(), R_OK) != 0) {
    std::cerr << "psync-launch: --tls-ca: cannot read '" << tls_ca << "': " << std::strerror(errno) << "\n";
    return 2;
  }
  const std::string host = absl::GetFlag(FLAGS_host);
  const std::string job_id = absl::GetFlag(FLAGS_job_id);
  const std::chrono::milliseconds grace(absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_grace)));
  const std::vector<std::string>& worker_flags = parsed->after_dashes;
  for (const std::string& f : worker_flags) {
    for (const char* reserved : {"--rank", "--world-size", "--world_size", "--coordinator", "--local-rank",
                                 "--local_rank", "--job-id", "--job_id", "--token", "--tls-ca", "--tls_ca"}) {
      std::string r = reserved;
      if (f == r || f.rfind(r + "=", 0) == 0) {
        std::cerr << "psync-launch: worker flag " << r << " is set by the launcher; use psync-launch's own flags\n";
        return 2;
      }
    }
  }

  auto find = [](const std::string& flag_value, const std::string& name, const std::vector<std::string>& rel,
                 const char* flag) -> std::optional<std::string> {
    if (!flag_value.empty()) {
      if (IsExecutable(flag_value)) return flag_value;
      std::cerr << "psync-launch: --" << flag << ": " << flag_value << " is not an executable\n";
      return std::nullopt;
    }
    std::optional<std::string> p = FindBinary(name, rel);
    if (!p) std::cerr << "psync-launch: cannot find " << name << " next to psync-launch or on PATH (use --" << flag << ")\n";
    return p;
  };
  auto coord_bin = find(absl::GetFlag(FLAGS_coordinator_bin), "psync-coordinator", {"server", "bin"}, "coordinator-bin");
  auto worker_bin = find(absl::GetFlag(FLAGS_worker_bin), "psync-worker", {"worker/runtime", "bin"}, "worker-bin");
  auto ctl_bin = find(absl::GetFlag(FLAGS_psyncctl_bin), "psyncctl", {"client", "client/psyncctl", "client/ctl", "bin"},
                      "psyncctl-bin");
  if (!coord_bin || !worker_bin) return 2;
  // The relay only pays with several ranks on the host (one stream either way otherwise).
  const bool use_relay = absl::GetFlag(FLAGS_relay) && nproc > 1;
  std::optional<std::string> relay_bin;
  if (use_relay) {
    relay_bin = find(absl::GetFlag(FLAGS_relay_bin), "psync-relay", {"client/relay", "bin"}, "relay-bin");
    if (!relay_bin) {
      std::cerr << "psync-launch: (or pass --relay=false to run without the plan relay)\n";
      return 2;
    }
  }
  if (!ctl_bin) std::cerr << "psync-launch: warning: without psyncctl, Ctrl-C stops workers with SIGTERM\n";

  if (pipe(g_signal_pipe) != 0) {
    std::perror("psync-launch: pipe");
    return 1;
  }
  fcntl(g_signal_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(g_signal_pipe[1], F_SETFL, O_NONBLOCK);
  fcntl(g_signal_pipe[0], F_SETFD, FD_CLOEXEC);
  fcntl(g_signal_pipe[1], F_SETFD, FD_CLOEXEC);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  char tmpl[] = "/tmp/psync-launch-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("psync-launch: mkdtemp");
    return 1;
  }
  const std::string tmpdir = tmpl;
  const std::string port_file = tmpdir + "/port";
  const std::string relay_port_file = tmpdir + "/relay_port";
  const std::string token_file = tmpdir + "/token";
  auto cleanup_tmp = [&] {
    unlink(port_file.c_str());
    unlink(relay_port_file.c_str());
    unlink(token_file.c_str());
    rmdir(tmpdir.c_str());
  };
  const bool generated_token = token.empty();
  if (generated_token) {
    token = RandomToken();
    int tfd = open(token_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const bool wrote = !token.empty() && tfd >= 0 && write(tfd, token.data(), token.size()) ==
                                                        static_cast<ssize_t>(token.size());
    if (tfd >= 0) close(tfd);
    if (!wrote) {
      std::cerr << "psync-launch: cannot make a token for the job (/dev/urandom or " << token_file
                << "): " << std::strerror(errno) << "; pass --token or set PSYNC_TOKEN\n";
      cleanup_tmp();
      return 1;
    }
  }

  // ---- coordinator
  int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  std::vector<std::string> cargv = {*coord_bin, absl::StrCat("--host=", host), absl::StrCat("--port=", port_flag),
                                    absl::StrCat("--world-size=", nproc), absl::StrCat("--job-id=", job_id),
                                    absl::StrCat("--port-file=", port_file)};
  // Restartable: the coordinator takes the world back as its next generation.
  if (max_restarts > 0) cargv.push_back(absl::StrCat("--max-restarts=", max_restarts));
  for (const std::string& a : SplitSpaces(absl::GetFlag(FLAGS_coordinator_args))) cargv.push_back(a);
  std::vector<std::string> cenv;
  if (!token.empty()) cenv.push_back("PSYNC_TOKEN=" + token);
  Child coordinator{"coordinator", Spawn(cargv, cenv, devnull), true};
  if (coordinator.pid < 0) {
    std::perror("psync-launch: fork");
    return 1;
  }
  std::vector<Child*> coord_only = {&coordinator};
  int port = 0;
  if (const PortWait w = WaitForPortFile(port_file, coordinator, &port); w != PortWait::kListening) {
    if (w == PortWait::kExited) {
      std::cerr << "psync-launch: psync-coordinator exited before listening (" << DescribeStatus(coordinator.status)
                << ")\n";
    } else if (w == PortWait::kInterrupted) {
      std::cerr << "psync-launch: interrupted while starting the coordinator\n";
    } else {
      std::cerr << "psync-launch: psync-coordinator did not write its port file within 30s\n";
    }
    StopAll(coord_only, std::chrono::milliseconds(3000));
    cleanup_tmp();
    return w == PortWait::kInterrupted ? 130 : 3;
  }
  const std::string coord_addr = absl::StrCat(host == "0.0.0.0" ? "127.0.0.1" : host, ":", port);
  std::cerr << "psync-launch: coordinator " << coord_addr << " (pid " << coordinator.pid
            << (generated_token ? absl::StrCat("; token in ", token_file) : std::string()) << "), starting " << nproc
            << " worker(s)\n";

  // ---- the host's plan relay (client/relay/README.md): the workers' Train
  // streams go through it, one host stream to the coordinator.
  Child relay{"psync-relay", -1, false};
  std::string relay_addr;
  if (use_relay) {
    std::vector<std::string> rargv = {*relay_bin, absl::StrCat("--coordinator=", coord_addr), "--port=0",
                                      absl::StrCat("--port-file=", relay_port_file),
                                      absl::StrCat("--expect-ranks=", nproc)};
    if (!tls_ca.empty()) rargv.push_back(absl::StrCat("--tls-ca=", tls_ca));
    std::vector<std::string> renv;
    if (!token.empty()) renv.push_back("PSYNC_TOKEN=" + token);
    relay.pid = Spawn(rargv, renv, devnull);
    relay.running = relay.pid > 0;
    std::vector<Child*> relay_only = {&relay};
    int rport = 0;
    const PortWait w = relay.running ? WaitForPortFile(relay_port_file, relay, &rport) : PortWait::kExited;
    if (w != PortWait::kListening) {
      // Why not go on without it: the job was asked to run with the relay;
      // starting differently would hide a broken install.
      if (w == PortWait::kInterrupted) {
        std::cerr << "psync-launch: interrupted while starting psync-relay\n";
      } else {
        std::cerr << "psync-launch: psync-relay did not start ("
                  << (w == PortWait::kTimedOut ? std::string("no port file within 30s") : DescribeStatus(relay.status))
                  << "); use --relay=false to run without it\n";
      }
      if (relay.running) StopAll(relay_only, std::chrono::milliseconds(3000));
      StopAll(coord_only, std::chrono::milliseconds(3000));
      cleanup_tmp();
      return w == PortWait::kInterrupted ? 130 : 3;
    }
    relay_addr = absl::StrCat("127.0.0.1:", rport);
    std::cerr << "psync-launch: plan relay " << relay_addr << " (pid " << relay.pid << "): one Train stream for the "
              << nproc << " local ranks\n";
  }
  std::vector<Child*> relay_only = {&relay};

  // ---- workers, one generation per pass (a new pass after each restart)
  const bool all_output = absl::GetFlag(FLAGS_all_output);
  std::vector<Child> workers;
  auto start_workers = [&](int restart) {
    bool added_resume = false;
    const std::vector<std::string> flags = psync::launch::WorkerFlagsFor(worker_flags, restart, &added_resume);
    if (added_resume) std::cerr << "psync-launch: workers resume from the newest checkpoint (--resume)\n";
    workers.assign(static_cast<size_t>(nproc), Child{});
    for (int r = 0; r < nproc; ++r) {
      std::vector<std::string> wargv = {*worker_bin};
      for (const std::string& f : flags) wargv.push_back(f);
      wargv.push_back(absl::StrCat("--rank=", r));
      wargv.push_back(absl::StrCat("--world-size=", nproc));
      wargv.push_back(absl::StrCat("--local-rank=", r));
      wargv.push_back(absl::StrCat("--coordinator=", coord_addr));
      wargv.push_back(absl::StrCat("--job-id=", job_id));
      if (!tls_ca.empty()) wargv.push_back(absl::StrCat("--tls-ca=", tls_ca));
      if (!relay_addr.empty()) wargv.push_back(absl::StrCat("--plan-relay=", relay_addr));
      // PSYNC_RESTART_COUNT: how many times the workers were restarted (as
      // torchrun's TORCHELASTIC_RESTART_COUNT).
      // Every rank on this host: LOCAL_WORLD_SIZE lets --backend=auto use shared memory.
      std::vector<std::string> wenv = {absl::StrCat("RANK=", r), absl::StrCat("WORLD_SIZE=", nproc),
                                       absl::StrCat("LOCAL_RANK=", r), absl::StrCat("LOCAL_WORLD_SIZE=", nproc),
                                       "MASTER_ADDR=" + coord_addr.substr(0, coord_addr.rfind(':')),
                                       absl::StrCat("MASTER_PORT=", port), absl::StrCat("PSYNC_RESTART_COUNT=", restart)};
      if (!token.empty()) wenv.push_back("PSYNC_TOKEN=" + token);
      // Many workers on few cores: one BLAS thread each unless the user chose.
      if (!std::getenv("OPENBLAS_NUM_THREADS")) wenv.push_back("OPENBLAS_NUM_THREADS=1");
      workers[r].what = absl::StrCat("rank ", r);
      workers[r].pid = Spawn(wargv, wenv, (r == 0 || all_output) ? -1 : devnull);
      workers[r].running = workers[r].pid > 0;
      if (workers[r].pid < 0) {
        std::perror("psync-launch: fork");
        workers[r].exit_code = 1;
      }
    }
  };

  // ---- supervise
  int interrupts = 0;
  int restarts_done = 0;
  bool stopping = false;  // a stop was asked for (or the coordinator is gone): no more restarts
  bool coordinator_reported = false;
  bool relay_reported = false;
  int64_t round = 0;      // supervision rounds: orders worker failures
  start_workers(0);
  while (true) {
    std::vector<Child*> wptrs;
    for (Child& w : workers) wptrs.push_back(&w);
    std::optional<Clock::time_point> kill_at;  // when to SIGTERM the workers still running
    bool failure_handled = false;
    bool restart = false;
    while (true) {
      ++round;
      Reap(wptrs, round);
      Reap(coord_only, round);
      if (relay.pid > 0) Reap(relay_only, round);
      bool any_running = std::any_of(wptrs.begin(), wptrs.end(), [](Child* c) { return c->running; });
      if (!coordinator.running && !coordinator_reported) {
        coordinator_reported = true;
        stopping = true;
        std::cerr << "psync-launch: psync-coordinator exited (" << DescribeStatus(coordinator.status)
                  << "); workers will stop\n";
        if (!kill_at && any_running) kill_at = Clock::now() + grace;
      }
      if (relay.pid > 0 && !relay.running && !relay_reported) {
        // Why like the coordinator: without the relay no worker can reach
        // the coordinator's Train service, so nothing can be restarted either.
        relay_reported = true;
        stopping = true;
        std::cerr << "psync-launch: psync-relay exited (" << DescribeStatus(relay.status) << "); workers will stop\n";
        if (!kill_at && any_running) kill_at = Clock::now() + grace;
      }
      std::vector<psync::launch::WorkerEnd> ends;
      for (int r = 0; r < nproc; ++r) {
        if (!workers[r].running) ends.push_back({r, workers[r].exit_code < 0 ? 1 : workers[r].exit_code,
                                                 workers[r].reaped_at});
      }
      const std::optional<psync::launch::WorkerEnd> failed = psync::launch::FirstFailure(ends);
      if (failed && !failure_handled) {
        failure_handled = true;
        const Child& dead = workers[static_cast<size_t>(failed->rank)];
        const psync::launch::RestartDecision d =
            psync::launch::Decide(*failed, restarts_done, max_restarts, stopping || interrupts > 0);
        if (d == psync::launch::RestartDecision::kRestart) {
          ++restarts_done;
          std::cerr << "psync-launch: rank " << failed->rank << " died ("
                    << (dead.pid > 0 ? DescribeStatus(dead.status) : "not started") << "); restart " << restarts_done
                    << " of " << max_restarts << ": stopping the other workers and starting all " << nproc
                    << " again\n";
          // Why at once: the coordinator has aborted (or is aborting) this
          // generation, so nothing the others do from here on counts.
          StopAll(wptrs, std::chrono::milliseconds(5000));
          restart = true;
          break;
        }
        if (max_restarts > 0) {
          if (d == psync::launch::RestartDecision::kNoRestartsLeft) {
            std::cerr << "psync-launch: rank " << failed->rank << " failed (" << DescribeStatus(dead.status)
                      << ") and all " << max_restarts << " restarts are used: the job fails\n";
          } else if (d == psync::launch::RestartDecision::kNotRetriable) {
            std::cerr << "psync-launch: rank " << failed->rank
                      << " exited 2 (bad flags or input): not restarted, it would fail the same way\n";
          }
        }
        // A failed worker: the coordinator aborts the others; give them `grace` to exit.
        if (!kill_at) kill_at = Clock::now() + grace;
      }
      if (!any_running) break;
      unsigned char sig = 0;
      while (read(g_signal_pipe[0], &sig, 1) == 1) {
        ++interrupts;
        stopping = true;
        if (interrupts == 1 && ctl_bin && coordinator.running) {
          std::cerr << "psync-launch: " << strsignal(sig)
                    << ": asking the coordinator to stop the job (again to force)\n";
          std::vector<std::string> ctl = {*ctl_bin, "--coordinator=" + coord_addr};
          if (!tls_ca.empty()) ctl.push_back("--tls-ca=" + tls_ca);
          ctl.push_back("shutdown");
          // The token goes in the environment, never on a command line (ps shows those).
          int rc = RunBounded(ctl, {"PSYNC_TOKEN=" + token}, std::chrono::milliseconds(10000));
          if (rc != 0) {
            std::cerr << "psync-launch: psyncctl shutdown failed (" << rc << "); stopping workers with SIGTERM\n";
            SignalAll(wptrs, SIGTERM);
          }
          kill_at = Clock::now() + grace;
        } else {
          std::cerr << "psync-launch: " << strsignal(sig) << ": stopping workers now\n";
          SignalAll(wptrs, interrupts >= 3 ? SIGKILL : SIGTERM);
          kill_at = Clock::now() + std::chrono::seconds(5);
        }
      }
      if (kill_at && Clock::now() >= *kill_at) {
        std::cerr << "psync-launch: workers still running after the grace period; terminating them\n";
        StopAll(wptrs, std::chrono::milliseconds(5000));
        break;
      }
      struct pollfd pfd = {g_signal_pipe[0], POLLIN, 0};
      poll(&pfd, 1, 50);
    }
    if (!restart) break;
    // A signal that came while the workers were being stopped ends the job here.
    unsigned char sig = 0;
    if (read(g_signal_pipe[0], &sig, 1) == 1) {
      std::cerr << "psync-launch: " << strsignal(sig) << ": not restarting\n";
      break;
    }
    start_workers(restarts_done);
  }
  if (devnull >= 0) close(devnull);

  // ---- tear down the relay and the coordinator (bounded)
  if (relay.running) StopAll(relay_only, std::chrono::milliseconds(5000));
  if (coordinator.running) {
    StopAll(coord_only, std::chrono::milliseconds(5000));
  }
  cleanup_tmp();

  // The exit status is the final generation's.
  int worst = 0;
  std::vector<std::string> parts;
  for (const Child& w : workers) {
    worst = std::max(worst, w.exit_code < 0 ? 1 : w.exit_code);
    parts.push_back(absl::StrCat(w.what, ": ", w.pid > 0 ? DescribeStatus(w.status) : "not started"));
  }
  std::cerr << "psync-launch: " << absl::StrJoin(parts, ", ")
            << (restarts_done > 0 ? absl::StrCat(" (after ", restarts_done, " restart", restarts_done > 1 ? "s" : "", ")")
                                  : std::string())
            << "; exit " << worst << "\n";
  return worst;
}
