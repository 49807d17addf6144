// The gRPC toolkit's status conversion (common/grpc_status.h): every code
// and its message survive absl -> gRPC -> absl, OK is OK both ways.
#include "common/grpc_status.h"

#include <gtest/gtest.h>

namespace psync {
namespace {

TEST(GrpcStatus, EveryCodeAndItsMessageRoundTrip) {
  for (int c = 1; c <= 16; ++c) {
    const absl::Status st(static_cast<absl::StatusCode>(c), "rank 3 lost: stream closed");
    const grpc::Status g = ToGrpcStatus(st);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    EXPECT_EQ(g.error_message(), "rank 3 lost: stream closed");
    EXPECT_EQ(FromGrpcStatus(g), st) << c;
  }
  EXPECT_EQ(ToGrpcStatus(absl::AbortedError("job aborted")).error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone")), absl::UnavailableError("gone"));
}

TEST(GrpcStatus, OkIsOkBothWays) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

}  // namespace
}  // namespace psync
