// ControlService: psync.v1.Control for psyncctl (Status, Workers, Buckets,
// Unused, Shutdown, Watch) on gRPC's callback API. The unary methods answer
// at once from JobState's views (Shutdown schedules the stop); a Watch is a
// reactor that writes each new EventLog event as it is appended, holding no
// thread while it waits.
#pragma once

#include <grpcpp/grpcpp.h>

#include "psync/v1/control.grpc.pb.h"
#include "server/auth.h"
#include "server/job_state.h"

namespace psync::server {

class ControlService final : public v1::Control::CallbackService {
 public:
  ControlService(JobState* job, const TokenAuth* auth) : job_(job), auth_(auth) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const v1::StatusRequest* req,
                                   v1::StatusResponse* resp) override;
  grpc::ServerUnaryReactor* Workers(grpc::CallbackServerContext* ctx, const v1::WorkersRequest* req,
                                    v1::WorkersResponse* resp) override;
  grpc::ServerUnaryReactor* Buckets(grpc::CallbackServerContext* ctx, const v1::BucketsRequest* req,
                                    v1::BucketsResponse* resp) override;
  grpc::ServerUnaryReactor* Unused(grpc::CallbackServerContext* ctx, const v1::UnusedRequest* req,
                                   v1::UnusedResponse* resp) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const v1::ShutdownRequest* req,
                                     v1::ShutdownResponse* resp) override;
  grpc::ServerWriteReactor<v1::Event>* Watch(grpc::CallbackServerContext* ctx, const v1::WatchRequest* req) override;

 private:
  JobState* job_;
  const TokenAuth* auth_;
};

}  // namespace psync::server
