#include "server/train_reactor.h"

#include <utility>

#include "common/grpc_status.h"
#include "common/grpc_write_queue.h"
#include "server/request_limits.h"

namespace psync::server {

// The write side: JobState's PlanSink for this stream, on the common write
// queue (common/grpc_write_queue.h). Push and Close run under JobState's
// lock and only queue; Flush starts the writes once it is released.
class TrainReactor::Writer final : public PlanSink {
 public:
  explicit Writer(TrainReactor* r) : queue_(r) {}

  bool Push(PlanPtr plan) override { return queue_.Enqueue(std::move(plan)); }
  void Close() override { queue_.CloseInput(); }  // why: no plan will be pushed any more
  void Flush() override { queue_.Pump(); }
  void WriteDone(bool ok) { queue_.OnWriteDone(ok); }
  // Reading has stopped: finish with `status` once the sink is closed (by
  // JobState, or by TrainStream when the stream never attached) and the
  // queue is drained.
  void ReadsDone(grpc::Status status) { queue_.FinishAfterDrain(std::move(status)); }
  void Detach() { queue_.Detach(); }

 private:
  GrpcWriteQueue<v1::Plan> queue_;
};

TrainReactor::TrainReactor(grpc::CallbackServerContext* ctx, JobState* job)
    : ctx_(ctx), writer_(std::make_shared<Writer>(this)), stream_(job, writer_) {
  StartRead(&raw_);
}

void TrainReactor::OnReadDone(bool ok) {
  TrainStream::Step step;
  if (!ok) {
    step = stream_.InputEnded(ctx_->IsCancelled());
  } else if (grpc::Status st = DecodeRequest(&raw_, "Train", kMaxTrainMessageBytes, &up_); !st.ok()) {
    step = stream_.Undecodable(st.error_message());
  } else {
    step = stream_.Receive(up_);
  }
  if (step.read_more) {
    StartRead(&raw_);
    return;
  }
  writer_->ReadsDone(ToGrpcStatus(step.status));
}

void TrainReactor::OnWriteDone(bool ok) { writer_->WriteDone(ok); }

void TrainReactor::OnDone() {
  writer_->Detach();
  delete this;
}

}  // namespace psync::server
