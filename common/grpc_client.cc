#include "common/grpc_client.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace psync {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(const std::string& tls_ca_file) {
  if (tls_ca_file.empty()) return grpc::InsecureChannelCredentials();
  std::ifstream f(tls_ca_file, std::ios::binary);
  if (!f) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS CA file '", tls_ca_file, "' cannot be read: ", std::strerror(errno)));
  }
  std::ostringstream pem;
  pem << f.rdbuf();
  if (pem.str().find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS CA file '", tls_ca_file, "' holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  return grpc::SslCredentials(ssl);
}

grpc::ChannelArguments KeepaliveChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  args.SetInt("grpc.enable_http_proxy", 0);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 3000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Why short: a coordinator that restarts (failover) is back within a
  // second or two; gRPC's own backoff (1 s growing to 120 s) would keep the
  // workers away from it long after.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

void AddBearerToken(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

}  // namespace psync
