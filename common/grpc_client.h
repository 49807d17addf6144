// What every psync gRPC client of the coordinator sets up the same way: its
// credentials (TLS from a CA file, or plaintext), the bearer token on each
// call and, for the long-lived clients (worker, relay), the channel
// arguments. Library psync_grpc_client:
// the one piece of common/ that links gRPC.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace psync {

// TLS credentials trusting the PEM CA certificate(s) in `tls_ca_file`, or
// plaintext when it is empty. InvalidArgument naming the file when it cannot
// be read or holds no PEM certificate.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(const std::string& tls_ca_file);

// Channel arguments of a long-lived client: messages up to 16 MiB, no HTTP
// proxy (a job's addresses are never behind one), and keepalive pings that
// notice a dead connection (no TCP reset, e.g. a cut link) within ~5 s, and
// reconnection tries 100 ms .. 1 s apart (a restarted coordinator is found soon).
grpc::ChannelArguments KeepaliveChannelArgs();

// Sends `token` as "authorization: Bearer <token>" on the call (what
// common/token_gate.h checks); nothing when it is empty (no --token).
void AddBearerToken(grpc::ClientContext* ctx, const std::string& token);

}  // namespace psync
