#include "server/control_service.h"

#include <deque>
#include <memory>
#include <mutex>

#include "common/grpc_status.h"
#include "psync/common/logging.h"
#include "server/limits.h"
#include "server/request_limits.h"

namespace psync::server {
namespace {

grpc::ServerUnaryReactor* Finished(grpc::CallbackServerContext* ctx, const grpc::Status& st) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(st);
  return r;
}

// Streams EventLog events until the final one (job finished or aborted),
// server shutdown, or the client cancels.
//
// Threads: Pump runs from the EventLog subscription (an appending thread,
// possibly with JobState's lock held: so it never calls JobState) and from
// gRPC reactions. `State` outlives the reactor (the subscription holds it);
// its mutex guards everything in it.
class WatchReactor final : public grpc::ServerWriteReactor<v1::Event> {
 public:
  WatchReactor(EventLog* log, int64_t after_seq, bool job_ended) : log_(log), state_(std::make_shared<State>()) {
    state_->reactor = this;
    state_->last = after_seq;
    state_->stop_when_idle = job_ended;  // why: no final event will come any more
    std::shared_ptr<State> s = state_;
    subscription_ = log_->Subscribe([s, log] { s->Pump(log); });
    state_->Pump(log_);
  }
  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> l(state_->mu);
      state_->writing = false;
      if (IsFinalEvent(state_->current)) state_->stop_when_idle = true;
      if (!ok) state_->stop_when_idle = state_->client_gone = true;
    }
    state_->Pump(log_);
  }
  void OnCancel() override {
    {
      std::lock_guard<std::mutex> l(state_->mu);
      state_->stop_when_idle = state_->client_gone = true;
    }
    state_->Pump(log_);
  }
  void OnDone() override {
    log_->Unsubscribe(subscription_);
    {
      std::lock_guard<std::mutex> l(state_->mu);
      state_->reactor = nullptr;
    }
    delete this;
  }

 private:
  struct State {
    std::mutex mu;
    WatchReactor* reactor = nullptr;
    int64_t last = 0;
    v1::Event current;  // being written while `writing`
    bool writing = false, finished = false, stop_when_idle = false, client_gone = false;

    void Pump(EventLog* log) {
      std::lock_guard<std::mutex> l(mu);
      if (reactor == nullptr || finished || writing) return;
      if (!client_gone) {
        std::vector<v1::Event> next = log->After(last);
        if (!next.empty()) {
          current = std::move(next.front());
          last = current.seq();
          writing = true;
          reactor->StartWrite(&current);
          return;
        }
      }
      if (stop_when_idle || log->closed()) {
        finished = true;
        reactor->Finish(grpc::Status::OK);
      }
    }
  };

  EventLog* log_;
  std::shared_ptr<State> state_;
  uint64_t subscription_ = 0;
};

// A view method: the request is empty (any bytes in it are unknown fields,
// ignored, but bounded); the response is JobState's view.
template <typename Response>
grpc::ServerUnaryReactor* AnswerView(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp, const char* method,
                                     void (JobState::*fill)(Response*) const, const JobState* job) {
  grpc::Status st = CheckRequestSize(*req, method, kMaxControlRequestBytes);
  if (st.ok()) {
    Response r;
    (job->*fill)(&r);
    EncodeResponse(r, resp);
  }
  return Finished(ctx, st);
}

}  // namespace

grpc::ServerUnaryReactor* ControlService::Status(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                 grpc::ByteBuffer* resp) {
  return AnswerView(ctx, req, resp, "Status", &JobState::FillStatus, job_);
}

grpc::ServerUnaryReactor* ControlService::Workers(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                  grpc::ByteBuffer* resp) {
  return AnswerView(ctx, req, resp, "Workers", &JobState::FillWorkers, job_);
}

grpc::ServerUnaryReactor* ControlService::Buckets(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                  grpc::ByteBuffer* resp) {
  return AnswerView(ctx, req, resp, "Buckets", &JobState::FillBuckets, job_);
}

grpc::ServerUnaryReactor* ControlService::Unused(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                 grpc::ByteBuffer* resp) {
  return AnswerView(ctx, req, resp, "Unused", &JobState::FillUnused, job_);
}

grpc::ServerUnaryReactor* ControlService::Shutdown(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* resp) {
  v1::ShutdownRequest req;
  grpc::Status st = DecodeRequest(const_cast<grpc::ByteBuffer*>(raw), "Shutdown", kMaxControlRequestBytes, &req);
  if (st.ok() && req.regroup()) {
    absl::StatusOr<int64_t> stop = job_->Regroup(req.reason().empty() ? "regroup requested" : req.reason());
    if (stop.ok()) {
      PSYNC_LOG(INFO) << "regroup requested: stop after iteration " << *stop;
      v1::ShutdownResponse r;
      r.set_stop_after_iteration(*stop);
      r.set_state(job_->state());
      EncodeResponse(r, resp);
    } else {
      st = ToGrpcStatus(stop.status());
    }
  } else if (st.ok()) {
    const v1::ShutdownResponse r = job_->Shutdown(req.reason().substr(0, kMaxStringBytes));
    if (after_shutdown_) after_shutdown_();
    PSYNC_LOG(INFO) << "shutdown requested: stop after iteration " << r.stop_after_iteration();
    EncodeResponse(r, resp);
  }
  return Finished(ctx, st);
}

grpc::ServerWriteReactor<v1::Event>* ControlService::Watch(grpc::CallbackServerContext* ctx,
                                                           const v1::WatchRequest* req) {
  EventLog& log = job_->events();
  // The log position first, then Ended(): a final event appended in between
  // is after the position, so it is still sent.
  const int64_t after = req->include_history() ? 0 : log.last_seq();
  const bool ended = job_->Ended();
  return new WatchReactor(&log, after, ended);
}

}  // namespace psync::server
