// The one conversion between absl::Status and grpc::Status (same code, same
// message, both ways; the codes are numbered alike). Part of the gRPC
// toolkit (header only: whoever includes it links psync_grpc_client or
// psync_grpc_server, and with them gRPC): the coordinator's replies, the
// worker's coordinator client, psync-relay.
#pragma once

#include <string>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace psync {

inline grpc::Status ToGrpcStatus(const absl::Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& st) {
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
}

}  // namespace psync
