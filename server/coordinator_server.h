// CoordinatorServer: builds and runs the gRPC server for one job:
// Coordinator + Control services (callback API), health (service "" and
// "psync.v1.Coordinator" SERVING), reflection only when asked for, optional
// token and TLS, and the timer thread (join / store deadlines, liveness).
// Used by main.cc and by in-process tests.
//
// Threads: gRPC's callback threads (a small pool that does not grow with
// the number of workers) run every RPC; this object owns the one TimerQueue
// thread and PlanFanOut's helper thread(s) (plan_fanout.h). Shutdown() may be called from any thread, once.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/job_state.h"

namespace grpc {
class Server;
}

namespace psync {
class TimerQueue;  // common/timer_queue.h
class TokenGate;   // common/token_gate.h
class RefusalCounters;  // common/refusal_counters.h
}  // namespace psync

namespace psync::server {

class KvStore;
class CoordinatorService;
class ControlService;
class LivenessTicker;
class PlanFanOut;

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
};

class CoordinatorServer {
 public:
  // Binds and starts serving. FailedPrecondition for an unauthenticated
  // non-loopback host (listen_policy.h); Unavailable if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(ServerOptions options);
  ~CoordinatorServer();

  int port() const { return port_; }
  JobState& job() { return *job_; }
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
  bool shut_down_ = false;
};

}  // namespace psync::server
