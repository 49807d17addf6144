// Bearer-token check for every RPC (metadata `authorization: Bearer <token>`).
#pragma once

#include <string>

#include <grpcpp/server_context.h>

#include "absl/strings/string_view.h"

namespace psync::server {

// True when `given` equals `secret`. The time taken depends only on the
// length of `given` (what the caller sent), never on where the first
// difference is or on the secret's length, so timing reveals neither.
bool TokenEquals(absl::string_view given, absl::string_view secret);

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
