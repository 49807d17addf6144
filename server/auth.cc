#include "server/auth.h"

namespace psync::server {
namespace {
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}
}  // namespace

grpc::Status TokenAuth::Check(const grpc::ServerContext* ctx) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this coordinator requires a token: pass --token or set PSYNC_TOKEN "
                        "(metadata 'authorization: Bearer <token>' is missing)");
  }
  const std::string value(it->second.data(), it->second.size());
  const std::string prefix = "Bearer ";
  if (value.compare(0, prefix.size(), prefix) != 0 ||
      !ConstantTimeEquals(value.substr(prefix.size()), token_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "invalid token: the coordinator's --token / PSYNC_TOKEN differs from the one sent");
  }
  return grpc::Status::OK;
}

}  // namespace psync::server
