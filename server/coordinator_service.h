// CoordinatorService: the psync.v1.Coordinator gRPC service (Join, StoreSet,
// StoreGet, Train). Stateless glue: the job lives in JobState, the store in
// KvStore.
//
// Threads: gRPC's sync-server threads run every handler. A Train stream's
// handler thread reads (reports, done); for the stream's lifetime it owns one
// writer thread that drains the rank's PlanMailbox onto the stream (one
// reader + one writer is what the sync API allows on a stream).
#pragma once

#include "psync/v1/coordinator.grpc.pb.h"
#include "server/auth.h"
#include "server/job_state.h"
#include "server/kv_store.h"

namespace psync::server {

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  CoordinatorService(JobState* job, KvStore* kv, const TokenAuth* auth)
      : job_(job), kv_(kv), auth_(auth) {}

  grpc::Status Join(grpc::ServerContext* ctx, const v1::JoinRequest* req,
                    v1::JoinResponse* resp) override;
  grpc::Status StoreSet(grpc::ServerContext* ctx, const v1::StoreSetRequest* req,
                        v1::StoreSetResponse* resp) override;
  grpc::Status StoreGet(grpc::ServerContext* ctx, const v1::StoreGetRequest* req,
                        v1::StoreGetResponse* resp) override;
  grpc::Status Train(grpc::ServerContext* ctx,
                     grpc::ServerReaderWriter<v1::Plan, v1::TrainUp>* stream) override;

 private:
  grpc::Status CheckJob(const std::string& job_id) const;
  JobState* job_;
  KvStore* kv_;
  const TokenAuth* auth_;
};

}  // namespace psync::server
