#include "server/control_service.h"

#include "common/logging.h"
#include "server/limits.h"

namespace psync::server {

grpc::Status ControlService::Status(grpc::ServerContext* ctx, const v1::StatusRequest*,
                                    v1::StatusResponse* resp) {
  grpc::Status st = auth_->Check(ctx);
  if (st.ok()) job_->FillStatus(resp);
  return st;
}

grpc::Status ControlService::Workers(grpc::ServerContext* ctx, const v1::WorkersRequest*,
                                     v1::WorkersResponse* resp) {
  grpc::Status st = auth_->Check(ctx);
  if (st.ok()) job_->FillWorkers(resp);
  return st;
}

grpc::Status ControlService::Buckets(grpc::ServerContext* ctx, const v1::BucketsRequest*,
                                     v1::BucketsResponse* resp) {
  grpc::Status st = auth_->Check(ctx);
  if (st.ok()) job_->FillBuckets(resp);
  return st;
}

grpc::Status ControlService::Unused(grpc::ServerContext* ctx, const v1::UnusedRequest*,
                                    v1::UnusedResponse* resp) {
  grpc::Status st = auth_->Check(ctx);
  if (st.ok()) job_->FillUnused(resp);
  return st;
}

grpc::Status ControlService::Shutdown(grpc::ServerContext* ctx, const v1::ShutdownRequest* req,
                                      v1::ShutdownResponse* resp) {
  grpc::Status st = auth_->Check(ctx);
  if (!st.ok()) return st;
  *resp = job_->Shutdown(req->reason().substr(0, kMaxStringBytes));
  PSYNC_LOG(INFO) << "shutdown requested: stop after iteration " << resp->stop_after_iteration();
  return grpc::Status::OK;
}

grpc::Status ControlService::Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                                   grpc::ServerWriter<v1::Event>* writer) {
  grpc::Status st = auth_->Check(ctx);
  if (!st.ok()) return st;
  EventLog& log = job_->events();
  int64_t last = req->include_history() ? 0 : log.last_seq();
  while (!ctx->IsCancelled()) {
    // Read Ended() before fetching, so the final event is never missed.
    const bool ended = job_->Ended();
    for (const v1::Event& e : log.WaitAfter(last, std::chrono::milliseconds(ended ? 0 : 500))) {
      if (!writer->Write(e)) return grpc::Status::OK;
      last = e.seq();
    }
    if (ended || log.closed()) break;
  }
  return grpc::Status::OK;
}

}  // namespace psync::server
