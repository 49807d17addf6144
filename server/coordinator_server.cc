#include "server/coordinator_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "server/auth.h"
#include "server/control_service.h"
#include "server/coordinator_service.h"
#include "server/kv_store.h"
#include "server/limits.h"
#include "server/liveness.h"

namespace psync::server {

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(ServerOptions options) {
  if (options.job.world_size < 1 || options.job.world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", options.job.world_size,
                                                   " is out of range 1..", kMaxWorldSize));
  }
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->options_ = options;
  s->job_ = std::make_unique<JobState>(options.job);
  s->kv_ = std::make_unique<KvStore>();
  s->auth_ = std::make_unique<TokenAuth>(options.token);
  s->coordinator_ = std::make_unique<CoordinatorService>(s->job_.get(), s->kv_.get(), s->auth_.get());
  s->control_ = std::make_unique<ControlService>(s->job_.get(), s->auth_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!options.tls_cert_pem.empty() || !options.tls_key_pem.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  grpc::ServerBuilder builder;
  const std::string addr = absl::StrCat(options.host, ":", options.port);
  builder.AddListeningPort(addr, creds, &s->port_);
  builder.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  builder.RegisterService(s->coordinator_.get());
  builder.RegisterService(s->control_.get());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", addr,
                                               " (port in use, or bad address / TLS key)"));
  }
  if (auto* health = s->server_->GetHealthCheckService()) {
    health->SetServingStatus("", true);
    health->SetServingStatus("psync.v1.Coordinator", true);
    health->SetServingStatus("psync.v1.Control", true);
  }
  s->liveness_ = std::make_unique<Liveness>(s->job_.get(), options.liveness_period);
  return s;
}

void CoordinatorServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (liveness_) liveness_->Stop();
  if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
  job_->Abort("coordinator shutting down");
  kv_->Close();
  job_->events().Close();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

}  // namespace psync::server
