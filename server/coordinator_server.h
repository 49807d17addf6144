// CoordinatorServer: builds and runs the gRPC server for one job:
// Coordinator + Control services, health (service "" and
// "psync.v1.Coordinator" SERVING), reflection, optional token and TLS, and
// the liveness thread. Used by main.cc and by in-process tests.
//
// Threads: gRPC owns its handler threads; this object owns the Liveness
// thread. Shutdown() may be called from any thread, once.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/job_state.h"

namespace grpc {
class Server;
}

namespace psync::server {

class KvStore;
class TokenAuth;
class CoordinatorService;
class ControlService;
class Liveness;

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 29500;                    // 0 = pick a free port (see port())
  JobConfig job;
  std::string token;                   // empty = no authentication
  std::string tls_cert_pem, tls_key_pem;  // both empty = plaintext
  std::chrono::milliseconds liveness_period{1000};
};

class CoordinatorServer {
 public:
  // Binds and starts serving. Unavailable if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(ServerOptions options);
  ~CoordinatorServer();

  int port() const { return port_; }
  JobState& job() { return *job_; }
  // Stops accepting RPCs, wakes blocked Join/StoreGet/Watch, ends streams
  // (running workers get ABORT "coordinator shutting down"), joins threads.
  void Shutdown();

 private:
  CoordinatorServer() = default;
  ServerOptions options_;
  int port_ = 0;
  std::unique_ptr<JobState> job_;
  std::unique_ptr<KvStore> kv_;
  std::unique_ptr<TokenAuth> auth_;
  std::unique_ptr<CoordinatorService> coordinator_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Liveness> liveness_;
  bool shut_down_ = false;
};

}  // namespace psync::server
