// The coordinator's token gate (common/token_gate.h): which calls need the
// token, what a refused caller is told, and the refusal counters by method.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/refusal_counters.h"
#include "common/token.h"
#include "common/token_gate.h"

namespace psync::server {

// common/token.h (shared with psync-relay).
using ::psync::BearerTokenMatches;
using ::psync::TokenEquals;

// Every method of psync.v1.Coordinator and psync.v1.Control, as gRPC paths
// ("/psync.v1.Control/Status"): the rows of the refusal counters.
std::vector<std::string> CoordinatorMethods();

// The gate for `token` (non-empty): every Coordinator and Control method
// needs it; grpc.health.v1 and server reflection answer without it, as
// before the gate.
std::shared_ptr<TokenGate> MakeCoordinatorGate(const std::string& token, std::shared_ptr<RefusalCounters> counters);

}  // namespace psync::server
