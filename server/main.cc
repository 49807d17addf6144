// psync-coordinator: rendezvous, bootstrap store, per-iteration plans and
// control for one job. Flags: docs/cli-contract.md.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "psync/common/logging.h"
#include "common/atomic_file.h"
#include "server/coordinator_server.h"
#include "server/job_config.h"
#include "server/job_resume.h"
#include "server/limits.h"
#include "server/listen_policy.h"

ABSL_FLAG(std::string, host, "0.0.0.0",
          "listen address; anything but loopback needs a token (or --allow-unauthenticated)");
ABSL_FLAG(int, port, 29500, "listen port (0 = pick a free port)");
ABSL_FLAG(int, world_size, 0, "number of workers in the job (required)");
ABSL_FLAG(std::string, job_id, "psync", "job id every worker must send");
ABSL_FLAG(std::string, token, "", "require 'authorization: Bearer <token>' (default: env PSYNC_TOKEN)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate file (with --tls-key: serve TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key file");
ABSL_FLAG(absl::Duration, join_timeout, absl::Seconds(300), "how long Join waits for the world");
ABSL_FLAG(absl::Duration, report_timeout, absl::Seconds(60),
          "a worker that sends no report for the current iteration this long is lost (if no other worker is "
          "silent)");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(5),
          "a worker not heard from (heartbeats, reports) this long is lost; when not given: "
          "min(5s, --report-timeout / 2)");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once listening");
ABSL_FLAG(bool, exit_when_done, false, "exit once the job has finished or aborted");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "serve a non-loopback --host without a token (anyone who can reach it can stop the job)");
ABSL_FLAG(bool, reflection, false, "enable gRPC server reflection (for grpcurl without .proto files)");
ABSL_FLAG(int, plan_lookahead, psync::server::kDefaultPlanLookahead,
          "K: workers may run up to K iterations ahead of the coordinator's plans (1..64); a shutdown "
          "stops every rank K-1 iterations after the first unsent plan");
ABSL_FLAG(int, max_restarts, 0,
          "restartable mode: a worker lost while the job runs aborts only the current generation, and the "
          "coordinator waits for every rank to Join again as the next generation (resuming from a checkpoint), "
          "at most this many times; 0 = a lost worker aborts the job");
ABSL_FLAG(std::string, recovery, psync::server::RecoveryName(psync::server::JobConfig{}.recovery),
          "with --max-restarts, what a lost worker costs the others: live = they keep their weights and "
          "optimizer state in memory and rejoin the next generation without restarting (the lost rank's "
          "replacement is healed from a peer; a --zero job falls back to restart); restart = every worker "
          "exits and the world resumes from the newest checkpoint");
ABSL_FLAG(int, min_world_size, 0,
          "elastic world size: when ranks are lost and not back within --rejoin-timeout, the next generation "
          "starts with the ranks there, down to this many (only a size that divides the workers' global batch); "
          "0 = --world-size (not elastic). Ranks that come back join at the next generation");
ABSL_FLAG(absl::Duration, rejoin_timeout, absl::Seconds(30),
          "elastic jobs: how long a generation waits for its full world before it starts with fewer ranks");
ABSL_FLAG(int, metrics_port, -1,
          "serve GET /metrics (Prometheus text format) on this port; -1 = off, 0 = pick a free port");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "address /metrics listens on; loopback by default, e.g. 0.0.0.0 for a scraper on another host "
          "(/metrics asks for no token: it only reads numbers)");
ABSL_FLAG(std::string, state_dir, "",
          "keep a durable journal of the job in this directory (created if missing; on Kubernetes a volume): a "
          "coordinator started again with it keeps the restart count, a shutdown asked for, the event log and the "
          "counters, takes an epoch above every earlier one there, and waits up to 60s for its port while the "
          "coordinator it replaces still holds it; empty = none (a coordinator started again learns the running "
          "job from its workers alone)");
ABSL_FLAG(absl::Duration, test_only_plan_delay, absl::ZeroDuration(),
          "TEST ONLY: hold every plan back this long before sending it (simulates a slow coordinator)");

namespace {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// With --state-dir, how long a start waits for a port in use (the flag's help).
constexpr std::chrono::milliseconds kStateDirBindWait{60000};

[[noreturn]] void BadFlag(const std::string& msg) { psync::ExitBadFlag("psync-coordinator", msg); }

void LogJob(const psync::server::ServerOptions& opt) {
  PSYNC_LOG(INFO) << "job '" << opt.job.job_id << "' world size " << opt.job.world_size
                  << (opt.token.empty() ? ", no token" : ", token required")
                  << (opt.tls_cert_pem.empty() ? "" : ", TLS") << (opt.reflection ? ", reflection on" : "")
                  << ", plan lookahead " << opt.job.plan_lookahead
                  << (opt.job.max_restarts > 0 ? ", up to " + std::to_string(opt.job.max_restarts) + " restarts (" +
                                                     psync::server::RecoveryName(opt.job.recovery) + " recovery)"
                                               : std::string())
                  << (opt.job.Elastic() ? ", elastic down to " + std::to_string(opt.job.min_world_size) +
                                              " ranks (rejoin timeout " +
                                              std::to_string(opt.job.rejoin_timeout.count() / 1000) + "s)"
                                        : std::string())
                  << (opt.job.test_only_plan_delay.count() > 0
                          ? ", TEST-ONLY plan delay " + std::to_string(opt.job.test_only_plan_delay.count()) + " ms"
                          : std::string());
}

// Until SIGINT/SIGTERM (blocked in every thread: `sigs`), or with
// --exit-when-done until the job has ended.
void WaitForTheEnd(const sigset_t& sigs, psync::server::CoordinatorServer& server, bool exit_when_done) {
  timespec tick{0, 200 * 1000 * 1000};
  while (true) {
    int sig = sigtimedwait(&sigs, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      PSYNC_LOG(INFO) << "signal " << sig << ": shutting down";
      return;
    }
    if (exit_when_done && server.job().Ended()) return;
  }
}

// The first of the job flags that is out of range ("" = none).
std::string BadJobFlag(const psync::server::ServerOptions& opt) {
  if (opt.job.world_size < 1) return "--world-size is required and must be >= 1";
  if (opt.port < 0 || opt.port > 65535) return "--port must be in 0..65535";
  if (opt.metrics_port < -1 || opt.metrics_port > 65535) return "--metrics-port must be -1 (off) or 0..65535";
  if (opt.job.job_id.empty()) return "--job-id must not be empty";
  if (opt.job.join_timeout.count() <= 0) return "--join-timeout must be > 0";
  if (opt.job.report_timeout.count() <= 0) return "--report-timeout must be > 0";
  if (opt.job.plan_lookahead < 1 || opt.job.plan_lookahead > psync::server::kMaxPlanLookahead) {
    return "--plan-lookahead must be in 1.." + std::to_string(psync::server::kMaxPlanLookahead);
  }
  if (opt.job.max_restarts < 0 || opt.job.max_restarts > psync::server::kMaxRestarts) {
    return "--max-restarts must be in 0.." + std::to_string(psync::server::kMaxRestarts);
  }
  if (opt.job.min_world_size < 0 || opt.job.min_world_size > opt.job.world_size) {
    return "--min-world-size must be in 1..--world-size (" + std::to_string(opt.job.world_size) +
           "), or 0 for not elastic";
  }
  if (opt.job.rejoin_timeout.count() <= 0) return "--rejoin-timeout must be > 0";
  if (opt.job.test_only_plan_delay.count() < 0) return "--test-only-plan-delay must be >= 0";
  return "";
}

// The flags as ServerOptions; a bad one exits 2 (BadFlag) naming it.
psync::server::ServerOptions ReadOptions(const psync::ParsedArgs& args) {
  psync::server::ServerOptions options;
  psync::server::ServerOptions* opt = &options;
  opt->host = absl::GetFlag(FLAGS_host);
  opt->port = absl::GetFlag(FLAGS_port);
  opt->job.world_size = absl::GetFlag(FLAGS_world_size);
  opt->job.job_id = absl::GetFlag(FLAGS_job_id);
  opt->job.join_timeout = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_join_timeout));
  opt->job.report_timeout = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_report_timeout));
  opt->token = absl::GetFlag(FLAGS_token);
  opt->allow_unauthenticated = absl::GetFlag(FLAGS_allow_unauthenticated);
  opt->reflection = absl::GetFlag(FLAGS_reflection);
  opt->job.plan_lookahead = absl::GetFlag(FLAGS_plan_lookahead);
  opt->job.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  opt->job.min_world_size = absl::GetFlag(FLAGS_min_world_size);
  if (std::optional<psync::server::JobConfig::Recovery> r = psync::server::ParseRecovery(absl::GetFlag(FLAGS_recovery))) {
    opt->job.recovery = *r;
  } else {
    BadFlag("--recovery must be live or restart, not '" + absl::GetFlag(FLAGS_recovery) + "'");
  }
  opt->job.rejoin_timeout = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_rejoin_timeout));
  opt->job.test_only_plan_delay = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_test_only_plan_delay));
  opt->metrics_host = absl::GetFlag(FLAGS_metrics_host);
  opt->metrics_port = absl::GetFlag(FLAGS_metrics_port);
  opt->state_dir = absl::GetFlag(FLAGS_state_dir);
  if (!opt->state_dir.empty()) opt->bind_wait = kStateDirBindWait;
  if (opt->token.empty()) {
    if (const char* t = std::getenv("PSYNC_TOKEN")) opt->token = t;
  }
  if (std::string bad = BadJobFlag(*opt); !bad.empty()) BadFlag(bad);
  if (args.given("heartbeat_timeout")) {
    opt->job.heartbeat_timeout = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_heartbeat_timeout));
    if (opt->job.heartbeat_timeout.count() <= 0) BadFlag("--heartbeat-timeout must be > 0");
  }  // else 0: JobState uses min(5s, report-timeout / 2)
  const std::string cert = absl::GetFlag(FLAGS_tls_cert), key = absl::GetFlag(FLAGS_tls_key);
  if (cert.empty() != key.empty()) BadFlag("--tls-cert and --tls-key go together");
  if (!cert.empty()) {
    if (!ReadFile(cert, &opt->tls_cert_pem)) BadFlag("--tls-cert: cannot read " + cert);
    if (!ReadFile(key, &opt->tls_key_pem)) BadFlag("--tls-key: cannot read " + key);
  }

  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const psync::ParsedArgs args = psync::ParseFlagsOrExit(
      "psync-coordinator", "psync-coordinator --world-size=N [--port=29500] [--job-id=psync] [flags]", argc, argv,
      psync::FlagsDefinedIn(__FILE__));
  if (!args.positional.empty()) {
    BadFlag("unexpected argument '" + args.positional.front() + "' (flags look like --name=value)");
  }
  const psync::server::ServerOptions opt = ReadOptions(args);
  if (absl::Status st = psync::server::CheckListenPolicy(opt.host, opt.token, opt.allow_unauthenticated); !st.ok()) {
    BadFlag(std::string(st.message()));
  }

  // Block SIGINT/SIGTERM in every thread; the main thread waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto server = psync::server::CoordinatorServer::Start(opt);
  if (!server.ok()) {
    std::fprintf(stderr, "psync-coordinator: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  const int port = (*server)->port();
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (absl::Status st = psync::WriteFileAtomically(port_file, std::to_string(port) + "\n"); !st.ok()) {
      std::fprintf(stderr, "psync-coordinator: --port-file: %s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  if ((*server)->metrics_port() >= 0) {
    std::cout << "psync-coordinator metrics on http://" << opt.metrics_host << ":" << (*server)->metrics_port()
              << "/metrics" << std::endl;
  }
  // Coordinator failover: a worker that obeyed a newer coordinator found
  // this one (it was paused or cut off while another took over). Why exit
  // at once, without the usual shutdown: that would send ABORT plans to
  // whoever still listens, and the job is the newer coordinator's now.
  psync::server::JobResume::SetFencedHook((*server)->job(), [](const std::string& why) {
    std::fprintf(stderr, "psync-coordinator: fenced: %s\n", why.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  });
  std::cout << "psync-coordinator listening on " << opt.host << ":" << port << " (epoch "
            << (*server)->job().config().epoch << ")" << std::endl;
  LogJob(opt);
  WaitForTheEnd(sigs, **server, absl::GetFlag(FLAGS_exit_when_done));
  (*server)->Shutdown();
  return 0;
}
