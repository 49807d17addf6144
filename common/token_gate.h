// TokenGate: refuses every call that lacks the bearer token before gRPC
// reads its message. psync-coordinator and psync-relay serve through
// GatedServerCredentials, which installs the gate as the credentials' auth
// metadata processor: gRPC core's server auth filter runs it on the call's
// headers (HTTP/2 HEADERS), before the server matches the call to a method,
// so a refused call never gets a read of its message posted, and no handler,
// parser or allocation of ours ever sees it. Measured (tests/integration/
// coordinator/auth_gate_test.cc, bench/auth_flood.sh): 32 concurrent
// 15 MiB unauthenticated calls leave the coordinator's peak RSS within a few
// MB of idle, where a check in the handler let each cost ~90 MB.
//
// The same on TLS and plaintext: gRPC's C++ InsecureServerCredentials
// cannot take a processor (it asserts), so GatedServerCredentials builds
// gRPC core's own insecure (or SSL) server credentials and sets the
// processor on them.
//
// The gate decides from the `:path` and `authorization` headers: paths
// under an open prefix (grpc.health, reflection) pass without a token;
// everything else needs "Bearer <token>" (constant-time compare, as
// common/token.h). Refusals are counted by method and logged at a bounded
// rate (RefusalCounters) with the method and what is known of the caller:
// gRPC 1.51 hands the processor no peer address (the connection's auth
// context holds only the transport kind), so the line names the caller's
// user-agent and the address it dialed (Describe in token_gate.cc).
//
// Threads: the processor runs on gRPC's transport threads, inline (never
// blocking: a compare and an atomic add), concurrently for many calls.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/server_credentials.h>

#include "absl/strings/string_view.h"
#include "common/refusal_counters.h"

namespace psync {

struct TokenGateOptions {
  std::string token;                       // required; an empty token admits nothing
  std::vector<std::string> open_prefixes;  // paths that need no token, e.g. "/grpc.health.v1.Health/"
  std::string server_name;                 // for the log lines ("psync-coordinator")
  std::string missing_message;             // what a caller without a token is told (UNAUTHENTICATED)
  std::string wrong_message;               // ... and one with another token
};

class TokenGate {
 public:
  TokenGate(TokenGateOptions options, std::shared_ptr<RefusalCounters> counters);

  // The decision for one call's headers: null when admitted, else the
  // message to refuse it with (counted, and logged at a bounded rate).
  // `authorization`: null when the header is missing. `caller`: what is
  // known of the caller, for the log line (called only when it is logged).
  const std::string* Admit(absl::string_view path, const absl::string_view* authorization,
                           const std::function<std::string()>& caller);

  const TokenGateOptions& options() const { return options_; }
  RefusalCounters& counters() { return *counters_; }

 private:
  const TokenGateOptions options_;
  const std::shared_ptr<RefusalCounters> counters_;
};

// Server credentials (TLS with the PEM pair when both are given, else
// plaintext) whose auth metadata processor is `gate`.
std::shared_ptr<grpc::ServerCredentials> GatedServerCredentials(std::shared_ptr<TokenGate> gate,
                                                                const std::string& tls_cert_pem = "",
                                                                const std::string& tls_key_pem = "");

}  // namespace psync
