// psync-relay: one host's agent between its local workers' Train streams and
// the coordinator (plan_relay.h; client/relay/README.md). psync-launch starts
// it (one per host) and passes --plan-relay=127.0.0.1:PORT to its workers.
//
//   psync-relay --coordinator=HOST:PORT [--port=0] [--port-file=F] [--expect-ranks=N]
//               [--form-wait=2s] [--max-hold-us=2000] [--tls-ca=FILE]
//
// Token: PSYNC_TOKEN in the environment (never a flag: ps shows those); the
// local streams must send it, and it goes upstream. Listens on 127.0.0.1
// only. SIGINT / SIGTERM: shuts down (the upstream streams are cancelled).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "client/relay/plan_relay.h"
#include "common/atomic_file.h"
#include "common/flags.h"
#include "psync/common/logging.h"

ABSL_FLAG(std::string, coordinator, "", "the coordinator, HOST:PORT (required)");
ABSL_FLAG(int, port, 0, "local port on 127.0.0.1 (0 = any free one)");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once listening");
ABSL_FLAG(int, expect_ranks, 0, "local ranks per generation: the host stream opens once they all said hello");
ABSL_FLAG(absl::Duration, form_wait, absl::Seconds(2),
          "open the host stream at most this long after the first local hello, with the ranks there are");
ABSL_FLAG(int, max_hold_us, 2000,
          "hold a report at most this long for the other local ranks' reports of its iteration");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA / certificate to trust: reach the coordinator over TLS");

int main(int argc, char** argv) {
  psync::ParseFlagsOrExit("psync-relay",
                          "psync-relay --coordinator=HOST:PORT [--port=0] [--port-file=F] [--expect-ranks=N] "
                          "[--form-wait=2s] [--max-hold-us=2000] [--tls-ca=FILE]",
                          argc, argv, psync::FlagsDefinedIn(__FILE__));
  psync::relay::RelayOptions opt;
  opt.upstream = absl::GetFlag(FLAGS_coordinator);
  if (opt.upstream.empty()) {
    std::fprintf(stderr, "psync-relay: --coordinator=HOST:PORT is required\n");
    return 2;
  }
  if (const char* t = std::getenv("PSYNC_TOKEN")) opt.token = t;
  opt.port = absl::GetFlag(FLAGS_port);
  opt.expect_ranks = absl::GetFlag(FLAGS_expect_ranks);
  opt.form_wait = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_form_wait));
  opt.max_hold = std::chrono::microseconds(absl::GetFlag(FLAGS_max_hold_us));
  opt.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  if (opt.port < 0 || opt.port > 65535 || opt.expect_ranks < 0 || opt.form_wait.count() <= 0 ||
      opt.max_hold.count() < 0) {
    std::fprintf(stderr, "psync-relay: --port must be 0..65535, --expect-ranks >= 0, --form-wait > 0, "
                         "--max-hold-us >= 0\n");
    return 2;
  }

  // Block SIGINT/SIGTERM in every thread; the main thread waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto relay = psync::relay::PlanRelay::Start(opt);
  if (!relay.ok()) {
    std::fprintf(stderr, "psync-relay: %s\n", std::string(relay.status().message()).c_str());
    return 1;
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (absl::Status st = psync::WriteFileAtomically(port_file, std::to_string((*relay)->port()) + "\n"); !st.ok()) {
      std::fprintf(stderr, "psync-relay: --port-file: %s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  std::cout << "psync-relay listening on 127.0.0.1:" << (*relay)->port() << " for coordinator " << opt.upstream
            << std::endl;
  int sig = 0;
  sigwait(&sigs, &sig);
  PSYNC_LOG(INFO) << "psync-relay: signal " << sig << ": shutting down";
  (*relay)->Shutdown();
  return 0;
}
