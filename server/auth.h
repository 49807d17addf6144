// Bearer-token check for every RPC (metadata `authorization: Bearer <token>`).
#pragma once

#include <string>

#include <grpcpp/server_context.h>

namespace psync::server {

class TokenAuth {
 public:
  explicit TokenAuth(std::string token) : token_(std::move(token)) {}
  bool enabled() const { return !token_.empty(); }
  // OK, or UNAUTHENTICATED with a message that says what to do.
  grpc::Status Check(const grpc::ServerContext* ctx) const;

 private:
  std::string token_;
};

}  // namespace psync::server
