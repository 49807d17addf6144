// CoordinatorService: the psync.v1.Coordinator gRPC service (Join, StoreSet,
// StoreGet, Train) on gRPC's callback API. Stateless glue: the job lives in
// JobState, the store in KvStore, each Train stream in a TrainReactor.
//
// Threads: gRPC runs every method and reaction on its own small pool of
// callback threads; nothing here blocks one. A Join waiting for the world
// and a StoreGet waiting for its key are reactors parked in JobState /
// KvStore, finished later by whichever thread completes them.
#pragma once

#include <grpcpp/grpcpp.h>

#include "psync/v1/coordinator.grpc.pb.h"
#include "server/auth.h"
#include "server/job_state.h"
#include "server/kv_store.h"

namespace psync::server {

// Join is a raw (ByteBuffer) method: its request is parsed and freed at
// once instead of living until the world completes, and every response
// shares one serialized copy of the common part (rendezvous.h,
// SharedJoinResponse), so thousands of waiting Joins cost little memory.
using CoordinatorServiceBase = v1::Coordinator::WithRawCallbackMethod_Join<
    v1::Coordinator::WithCallbackMethod_StoreSet<v1::Coordinator::WithCallbackMethod_StoreGet<
        v1::Coordinator::WithCallbackMethod_Train<v1::Coordinator::Service>>>>;

class CoordinatorService final : public CoordinatorServiceBase {
 public:
  CoordinatorService(JobState* job, KvStore* kv, const TokenAuth* auth) : job_(job), kv_(kv), auth_(auth) {}

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* StoreSet(grpc::CallbackServerContext* ctx, const v1::StoreSetRequest* req,
                                     v1::StoreSetResponse* resp) override;
  grpc::ServerUnaryReactor* StoreGet(grpc::CallbackServerContext* ctx, const v1::StoreGetRequest* req,
                                     v1::StoreGetResponse* resp) override;
  grpc::ServerBidiReactor<v1::TrainUp, v1::Plan>* Train(grpc::CallbackServerContext* ctx) override;

 private:
  grpc::Status CheckJob(const std::string& job_id) const;
  JobState* job_;
  KvStore* kv_;
  const TokenAuth* auth_;
};

}  // namespace psync::server
