// Bearer-token check for every RPC (metadata `authorization: Bearer <token>`).
#pragma once

#include <string>

#include <grpcpp/server_context.h>

#include "absl/strings/string_view.h"
#include "common/token.h"

namespace psync::server {

// common/token.h (shared with psync-relay).
using ::psync::BearerTokenMatches;
using ::psync::TokenEquals;

class TokenAuth {
 public:
  explicit TokenAuth(std::string token) : token_(std::move(token)) {}
  bool enabled() const { return !token_.empty(); }
  // OK, or UNAUTHENTICATED with a message that says what to do.
  grpc::Status Check(const grpc::ServerContextBase* ctx) const;

 private:
  std::string token_;
};

}  // namespace psync::server
