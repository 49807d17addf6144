// ControlService: psync.v1.Control for psyncctl (Status, Workers, Buckets,
// Unused, Shutdown, Watch) on gRPC's callback API. The unary methods answer
// at once from JobState's views (Shutdown schedules the stop); a Watch is a
// reactor that writes each new EventLog event as it is appended, holding no
// thread while it waits.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <utility>

#include "psync/v1/control.grpc.pb.h"
#include "server/job_state.h"

namespace psync::server {

// The unary methods are raw (ByteBuffer): a request over its method's size
// limit (request_limits.h; control requests are empty or a short reason)
// is refused before anything decodes it. Watch's request is decoded by
// gRPC, within the transport's limit.
using ControlServiceBase = v1::Control::WithRawCallbackMethod_Status<v1::Control::WithRawCallbackMethod_Workers<
    v1::Control::WithRawCallbackMethod_Buckets<v1::Control::WithRawCallbackMethod_Unused<
        v1::Control::WithRawCallbackMethod_Shutdown<v1::Control::WithCallbackMethod_Watch<v1::Control::Service>>>>>>;

class ControlService final : public ControlServiceBase {
 public:
  // `after_shutdown` (optional) runs after a Shutdown was scheduled and
  // before it is answered (the journal's write: coordinator_server.cc).
  explicit ControlService(JobState* job, std::function<void()> after_shutdown = {})
      : job_(job), after_shutdown_(std::move(after_shutdown)) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                   grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Workers(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                    grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Buckets(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                    grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Unused(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                   grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerWriteReactor<v1::Event>* Watch(grpc::CallbackServerContext* ctx, const v1::WatchRequest* req) override;

 private:
  JobState* job_;
  const std::function<void()> after_shutdown_;
};

}  // namespace psync::server
