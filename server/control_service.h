// ControlService: psync.v1.Control for psyncctl (Status, Workers, Buckets,
// Unused, Shutdown, Watch). Handlers run on gRPC's sync-server threads and
// only read JobState snapshots (Shutdown schedules the stop).
#pragma once

#include <atomic>

#include "psync/v1/control.grpc.pb.h"
#include "server/auth.h"
#include "server/job_state.h"

namespace psync::server {

class ControlService final : public v1::Control::Service {
 public:
  ControlService(JobState* job, const TokenAuth* auth) : job_(job), auth_(auth) {}

  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusResponse* resp) override;
  grpc::Status Workers(grpc::ServerContext* ctx, const v1::WorkersRequest* req,
                       v1::WorkersResponse* resp) override;
  grpc::Status Buckets(grpc::ServerContext* ctx, const v1::BucketsRequest* req,
                       v1::BucketsResponse* resp) override;
  grpc::Status Unused(grpc::ServerContext* ctx, const v1::UnusedRequest* req,
                      v1::UnusedResponse* resp) override;
  grpc::Status Shutdown(grpc::ServerContext* ctx, const v1::ShutdownRequest* req,
                        v1::ShutdownResponse* resp) override;
  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                     grpc::ServerWriter<v1::Event>* writer) override;

 private:
  JobState* job_;
  const TokenAuth* auth_;
};

}  // namespace psync::server
