// CoordinatorServer: builds and runs the gRPC server for one job:
// Coordinator + Control services (callback API), health (service "" and
// "psync.v1.Coordinator" SERVING), reflection only when asked for, optional
// token and TLS, the timer thread (join / store deadlines, liveness), and,
// with ServerOptions::metrics_port, GET /metrics (Prometheus text,
// job_metrics.h) on an HTTP server of its own. Used by main.cc and by
// in-process tests.
//
// Threads: gRPC's callback threads (a small pool that does not grow with
// the number of workers) run every RPC; this object owns the one TimerQueue
// thread, PlanFanOut's helper thread(s) (plan_fanout.h) and, with metrics
// on, MetricsHttpServer's thread (every HTTP client is served there; it
// takes JobState's lock only to copy a snapshot, at most every 100 ms).
// Shutdown() may be called from any thread, once.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/job_state.h"

namespace grpc {
class Server;
class ServerCredentials;
}

namespace psync {
class TimerQueue;  // common/timer_queue.h
class MetricsHttpServer;  // common/metrics_http_server.h
class TokenGate;   // common/token_gate.h
class RefusalCounters;  // common/refusal_counters.h
}  // namespace psync

namespace psync::server {

class KvStore;
class CoordinatorService;
class ControlService;
class LivenessTicker;
class PlanFanOut;
class Journal;
class JournalWriter;

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 29500;                    // 0 = pick a free port (see port())
  JobConfig job;
  std::string token;                   // empty = no authentication
  // Serving on a non-loopback host without a token is refused unless this is set.
  bool allow_unauthenticated = false;
  bool reflection = false;             // gRPC server reflection (grpcurl without .proto files)
  std::string tls_cert_pem, tls_key_pem;  // both empty = plaintext
  std::chrono::milliseconds liveness_period{1000};
  // GET /metrics on metrics_host:metrics_port; -1 = off (the default), 0 =
  // pick a free port (see metrics_port()). No token is asked for: it only
  // reads numbers (docs/cli-contract.md, "/metrics"), and it listens on
  // loopback unless metrics_host says otherwise.
  std::string metrics_host = "127.0.0.1";
  int metrics_port = -1;
  // The durable journal (journal.h; "" = none): opened before serving,
  // what it kept restored (job_journal.h), the epoch taken above every one
  // there, and kept current while the job runs.
  std::string state_dir;
  // How long a port in use is tried again before Start gives up (0 = not
  // at all): with a state dir, the coordinator that held it may be one this
  // start replaces, which lets go of it once it sees the newer journal.
  std::chrono::milliseconds bind_wait{0};
};

class CoordinatorServer {
 public:
  // Binds and starts serving. FailedPrecondition for an unauthenticated
  // non-loopback host (listen_policy.h); Unavailable if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(ServerOptions options);
  ~CoordinatorServer();

  int port() const { return port_; }
  // The port /metrics is served on; -1 when off.
  int metrics_port() const;
  JobState& job() { return *job_; }
  // The journal's writer; null without ServerOptions::state_dir.
  JournalWriter* journal() { return journal_.get(); }
  KvStore& kv() { return *kv_; }
  // Calls refused for want of the token, by method (null without a token):
  // what /metrics will export.
  const RefusalCounters* refusals() const { return refusals_.get(); }
  // Stops accepting RPCs, answers waiting Joins/StoreGets/Watches, ends
  // streams (running workers get ABORT "coordinator shutting down"), joins
  // the timer thread.
  void Shutdown();

 private:
  CoordinatorServer() = default;
  // Builds the gRPC server on options_' address (once: a service registers
  // with one server only), after waiting up to bind_wait for a port in use.
  absl::Status Listen(const std::shared_ptr<grpc::ServerCredentials>& creds);
  absl::Status BuildAndStart(const std::shared_ptr<grpc::ServerCredentials>& creds);
  // Restores what `journal` kept, claims it (the first write), and keeps it current.
  absl::Status StartJournal(std::unique_ptr<Journal> journal);
  ServerOptions options_;
  int port_ = 0;
  std::unique_ptr<TimerQueue> timers_;
  std::unique_ptr<PlanFanOut> fanout_;  // before job_: JobState uses it
  std::unique_ptr<JobState> job_;
  std::unique_ptr<KvStore> kv_;
  std::shared_ptr<RefusalCounters> refusals_;  // null without a token
  std::shared_ptr<TokenGate> gate_;            // null without a token
  std::unique_ptr<CoordinatorService> coordinator_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<LivenessTicker> liveness_;
  std::unique_ptr<JournalWriter> journal_;  // after job_: it reads JobState; null without a state dir
  std::unique_ptr<MetricsHttpServer> metrics_;  // after job_: its thread reads JobState
  bool shut_down_ = false;
};

}  // namespace psync::server
