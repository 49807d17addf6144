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
#include "server/job_state.h"
#include "server/kv_store.h"

namespace psync::server {

// Every method is raw (ByteBuffer): a request is checked against its
// method's size limit before anything decodes it (request_limits.h). Join's
// request is parsed and freed at once instead of living until the world
// completes, and every response shares one serialized copy of the common
// part (rendezvous.h, SharedJoinResponse), so thousands of waiting Joins
// cost little memory. Train reads raw messages so that bytes that do not
// decode are told apart from the end of the stream (train_reactor.h).
using CoordinatorServiceBase = v1::Coordinator::WithRawCallbackMethod_Join<
    v1::Coordinator::WithRawCallbackMethod_StoreSet<v1::Coordinator::WithRawCallbackMethod_StoreGet<
        v1::Coordinator::WithRawCallbackMethod_Train<v1::Coordinator::Service>>>>;

class CoordinatorService final : public CoordinatorServiceBase {
 public:
  CoordinatorService(JobState* job, KvStore* kv) : job_(job), kv_(kv) {}

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* StoreSet(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* StoreGet(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Train(grpc::CallbackServerContext* ctx) override;

 private:
  grpc::Status CheckJob(const std::string& job_id) const;
  JobState* job_;
  KvStore* kv_;
};

}  // namespace psync::server
