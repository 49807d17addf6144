// Secure-by-default listening rules of the coordinator (docs/cli-contract.md):
// anyone who can reach the port could otherwise stop the job or overwrite
// the store keys Gloo's rendezvous reads, so a coordinator that is reachable
// from other machines must require a token.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace psync::server {

// True for addresses only this machine can reach: 127.0.0.0/8, ::1 (also
// written [::1]) and "localhost". Anything else, including 0.0.0.0, [::] and
// host names, counts as reachable from the network.
bool IsLoopbackHost(const std::string& host);

// FailedPrecondition naming the fixes when `host` is not loopback, `token` is
// empty and `allow_unauthenticated` is false.
absl::Status CheckListenPolicy(const std::string& host, const std::string& token, bool allow_unauthenticated);

// True when another socket listens on `host`:`port` now (a bind with
// SO_REUSEADDR, as gRPC's, fails with EADDRINUSE); false for port 0 and
// for an address that does not resolve (the real bind reports those).
bool PortInUse(const std::string& host, int port);

}  // namespace psync::server
