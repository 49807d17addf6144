#include "server/auth.h"

namespace psync::server {

grpc::Status TokenAuth::Check(const grpc::ServerContextBase* ctx) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this coordinator requires a token: pass --token or set PSYNC_TOKEN "
                        "(metadata 'authorization: Bearer <token>' is missing)");
  }
  if (!BearerTokenMatches(absl::string_view(it->second.data(), it->second.size()), token_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "invalid token: the coordinator's --token / PSYNC_TOKEN differs from the one sent");
  }
  return grpc::Status::OK;
}

}  // namespace psync::server
