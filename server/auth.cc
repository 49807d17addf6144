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
  const absl::string_view value(it->second.data(), it->second.size());
  const absl::string_view prefix = "Bearer ";
  const bool has_prefix = value.substr(0, prefix.size()) == prefix;
  if (!has_prefix || !TokenEquals(value.substr(has_prefix ? prefix.size() : 0), token_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "invalid token: the coordinator's --token / PSYNC_TOKEN differs from the one sent");
  }
  return grpc::Status::OK;
}

}  // namespace psync::server
