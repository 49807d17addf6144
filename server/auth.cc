#include "server/auth.h"

namespace psync::server {

bool TokenEquals(absl::string_view given, absl::string_view secret) {
  // Walk `given` whole; compare with the secret cycled to its length (an
  // empty secret compares with zero bytes). A length mismatch is folded
  // into the same accumulator instead of returning early.
  unsigned char diff = given.size() != secret.size() ? 1 : 0;
  diff |= secret.empty() ? 1 : 0;
  const size_t n = secret.size();
  for (size_t i = 0; i < given.size(); ++i) {
    const unsigned char s = n ? static_cast<unsigned char>(secret[i % n]) : 0;
    diff |= static_cast<unsigned char>(given[i]) ^ s;
  }
  // Keep the compiler from turning the loop into an early-exit compare.
  volatile unsigned char result = diff;
  return result == 0;
}

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
