#include "server/coordinator_service.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/grpc_status.h"
#include "server/limits.h"

namespace psync::server {

grpc::Status CoordinatorService::CheckJob(const std::string& job_id) const {
  if (job_id != job_->config().job_id) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("job id '", job_id.substr(0, 128),
                                     "' does not match this coordinator's job '",
                                     job_->config().job_id, "'"));
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Join(grpc::ServerContext* ctx, const v1::JoinRequest* req,
                                      v1::JoinResponse* resp) {
  grpc::Status auth = auth_->Check(ctx);
  if (!auth.ok()) return auth;
  absl::StatusOr<v1::JoinResponse> r = job_->Join(*req, [ctx] { return ctx->IsCancelled(); });
  if (!r.ok()) {
    PSYNC_LOG(WARNING) << "Join from " << req->hostname().substr(0, 64) << ":" << req->pid()
                       << " refused: " << r.status().message();
    return ToGrpc(r.status());
  }
  PSYNC_LOG(INFO) << "rank " << r->rank() << " (" << req->hostname() << ":" << req->pid()
                  << ") joined";
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::StoreSet(grpc::ServerContext* ctx, const v1::StoreSetRequest* req,
                                          v1::StoreSetResponse*) {
  grpc::Status st = auth_->Check(ctx);
  if (st.ok()) st = CheckJob(req->job_id());
  if (!st.ok()) return st;
  return ToGrpc(kv_->Set(req->key(), req->value()));
}

grpc::Status CoordinatorService::StoreGet(grpc::ServerContext* ctx, const v1::StoreGetRequest* req,
                                          v1::StoreGetResponse* resp) {
  grpc::Status st = auth_->Check(ctx);
  if (st.ok()) st = CheckJob(req->job_id());
  if (!st.ok()) return st;
  if (req->timeout_ms() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("timeout_ms is ", req->timeout_ms(), "; must be >= 0"));
  }
  const auto timeout = std::chrono::milliseconds(std::min(req->timeout_ms(), kMaxStoreWaitMs));
  absl::StatusOr<std::string> v = kv_->Get(req->key(), timeout, [ctx] { return ctx->IsCancelled(); });
  if (!v.ok()) return ToGrpc(v.status());
  resp->set_value(std::move(*v));
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Train(grpc::ServerContext* ctx,
                                       grpc::ServerReaderWriter<v1::Plan, v1::TrainUp>* stream) {
  grpc::Status auth = auth_->Check(ctx);
  if (!auth.ok()) return auth;
  v1::TrainUp up;
  if (!stream->Read(&up)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Train stream closed before hello");
  }
  if (!up.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message on a Train stream must be hello{job_id, rank, generation}");
  }
  absl::StatusOr<std::shared_ptr<PlanMailbox>> mb = job_->Attach(up.hello());
  if (!mb.ok()) return ToGrpc(mb.status());
  const int rank = up.hello().rank();
  std::shared_ptr<PlanMailbox> mailbox = *mb;

  // Writer: owns stream->Write for this stream's lifetime.
  std::thread writer([&stream, mailbox] {
    v1::Plan plan;
    while (mailbox->Pop(&plan)) {
      if (!stream->Write(plan)) break;
    }
  });

  grpc::Status result = grpc::Status::OK;
  std::string cause = "stream closed";
  bool done = false;
  while (!done && stream->Read(&up)) {
    absl::Status st;
    switch (up.msg_case()) {
      case v1::TrainUp::kReport:
        st = job_->Report(rank, up.report());
        break;
      case v1::TrainUp::kDone:
        st = job_->Done(rank, up.done());
        done = true;
        break;
      case v1::TrainUp::kHeartbeat:
        st = job_->Heartbeat(rank, up.heartbeat());
        break;
      case v1::TrainUp::kHello:
        st = absl::InvalidArgumentError("hello sent twice on one Train stream");
        break;
      default:
        st = absl::InvalidArgumentError("empty TrainUp message (no hello, report, heartbeat or done)");
        break;
    }
    if (!st.ok()) {
      result = ToGrpc(st);
      cause = absl::StrCat("protocol error: ", st.message());
      PSYNC_LOG(WARNING) << "rank " << rank << ": " << st.message();
      break;
    }
  }
  if (!done && ctx->IsCancelled()) cause = "stream closed (cancelled)";
  job_->StreamClosed(rank, cause);  // closes the mailbox; the writer drains it and exits
  writer.join();
  return result;
}

}  // namespace psync::server
