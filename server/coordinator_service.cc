#include "server/coordinator_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "psync/common/logging.h"
#include "server/limits.h"
#include "server/request_limits.h"
#include "server/train_reactor.h"

namespace psync::server {
namespace {

void ReleaseShared(void* p) { delete static_cast<std::shared_ptr<const SharedJoinResponse>*>(p); }

// The response bytes: the shared part (one buffer for every rank, kept alive
// by the slice) followed by this rank's own fields.
grpc::ByteBuffer ResponseBytes(const JoinAnswer& a) {
  const std::string& bytes = a.shared->bytes;
  grpc::Slice slices[2] = {
      grpc::Slice(const_cast<char*>(bytes.data()), bytes.size(), &ReleaseShared,
                  new std::shared_ptr<const SharedJoinResponse>(a.shared)),
      grpc::Slice(a.RankBytes())};
  return grpc::ByteBuffer(slices, 2);
}

// A Join: answered by JobState when the world completes (or the join fails).
class JoinReactor final : public grpc::ServerUnaryReactor {
 public:
  JoinReactor(JobState* job, const v1::JoinRequest& req, grpc::ByteBuffer* resp) : job_(job) {
    const std::string who = absl::StrCat(req.hostname().substr(0, 64), ":", req.pid());
    ticket_ = job->Join(req, [this, resp, who](absl::StatusOr<JoinAnswer> r) {
      if (!r.ok()) {
        PSYNC_LOG(WARNING) << "Join from " << who << " refused: " << r.status().message();
        Finish(ToGrpcStatus(r.status()));
        return;
      }
      // One line per rank only for small worlds; large ones have `psyncctl workers`.
      if (job_->config().world_size <= 64) {
        PSYNC_LOG(INFO) << "rank " << r->rank << " (" << who << ") joined";
      } else {
        PSYNC_LOG(DEBUG) << "rank " << r->rank << " (" << who << ") joined";
      }
      *resp = ResponseBytes(*r);
      Finish(grpc::Status::OK);
    });
  }
  void OnCancel() override { job_->CancelJoin(ticket_); }
  void OnDone() override { delete this; }

 private:
  JobState* job_;
  uint64_t ticket_ = 0;  // written before gRPC can call OnCancel (the reactor is bound after return)
};

// A StoreGet: answered by KvStore when the key appears or the wait ends.
class StoreGetReactor final : public grpc::ServerUnaryReactor {
 public:
  StoreGetReactor(KvStore* kv, const std::string& key, std::chrono::milliseconds timeout, grpc::ByteBuffer* resp)
      : kv_(kv) {
    ticket_ = kv->Get(key, timeout, [this, resp](absl::StatusOr<std::string> v) {
      if (!v.ok()) {
        Finish(ToGrpcStatus(v.status()));
        return;
      }
      v1::StoreGetResponse r;
      r.set_value(std::move(*v));
      EncodeResponse(r, resp);
      Finish(grpc::Status::OK);
    });
  }
  void OnCancel() override { kv_->Cancel(ticket_); }
  void OnDone() override { delete this; }

 private:
  KvStore* kv_;
  uint64_t ticket_ = 0;
};

grpc::ServerUnaryReactor* Finished(grpc::CallbackServerContext* ctx, const grpc::Status& st) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(st);
  return r;
}

}  // namespace

grpc::Status CoordinatorService::CheckJob(const std::string& job_id) const {
  if (job_id != job_->config().job_id) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("job id '", job_id.substr(0, 128), "' does not match this coordinator's job '",
                                     job_->config().job_id, "'"));
  }
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* CoordinatorService::Join(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                   grpc::ByteBuffer* resp) {
  auto* raw = const_cast<grpc::ByteBuffer*>(req);
  // Why count first: decoding a manifest costs ~150 bytes per entry, so one
  // of over a million tiny entries would cost ~180 MB before
  // ValidateJoinRequest could refuse it (and glibc keeps most of it).
  if (grpc::Status st = CheckRequestSize(*raw, "Join", kMaxJoinRequestBytes); !st.ok()) {
    raw->Clear();
    return Finished(ctx, st);
  }
  if (const long n = CountJoinManifest(*raw); n > kMaxParams) {
    raw->Clear();
    return Finished(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      absl::StrCat("manifest has ", n, " parameters; expected 1..", kMaxParams)));
  }
  v1::JoinRequest request;
  // Deserialize clears the buffer: the request's bytes are freed here, not
  // when the world completes.
  if (grpc::Status st = DecodeRequest(raw, "Join", kMaxJoinRequestBytes, &request); !st.ok()) {
    return Finished(ctx, st);
  }
  return new JoinReactor(job_, request, resp);
}

grpc::ServerUnaryReactor* CoordinatorService::StoreSet(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                       grpc::ByteBuffer* resp) {
  v1::StoreSetRequest req;
  grpc::Status st = DecodeRequest(const_cast<grpc::ByteBuffer*>(raw), "StoreSet", kMaxStoreSetRequestBytes, &req);
  if (st.ok()) st = CheckJob(req.job_id());
  if (st.ok()) st = ToGrpcStatus(kv_->Set(req.key(), req.value()));
  if (st.ok()) EncodeResponse(v1::StoreSetResponse(), resp);
  return Finished(ctx, st);
}

grpc::ServerUnaryReactor* CoordinatorService::StoreGet(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                       grpc::ByteBuffer* resp) {
  v1::StoreGetRequest req;
  grpc::Status st = DecodeRequest(const_cast<grpc::ByteBuffer*>(raw), "StoreGet", kMaxStoreGetRequestBytes, &req);
  if (st.ok()) st = CheckJob(req.job_id());
  if (st.ok() && req.timeout_ms() < 0) {
    st = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      absl::StrCat("timeout_ms is ", req.timeout_ms(), "; must be >= 0"));
  }
  if (!st.ok()) return Finished(ctx, st);
  const auto timeout = std::chrono::milliseconds(std::min(req.timeout_ms(), kMaxStoreWaitMs));
  return new StoreGetReactor(kv_, req.key(), timeout, resp);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* CoordinatorService::Train(
    grpc::CallbackServerContext* ctx) {
  return new TrainReactor(ctx, job_);
}

}  // namespace psync::server
