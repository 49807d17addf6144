#include "server/train_reactor.h"

#include <deque>
#include <mutex>

#include "server/grpc_status.h"
#include "server/request_limits.h"

namespace psync::server {

// The write side: JobState's PlanSink for this stream.
class TrainReactor::Writer final : public PlanSink {
 public:
  explicit Writer(TrainReactor* r) : reactor_(r) {}

  bool Push(PlanPtr plan) override {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_ || finished_) return false;
    queue_.push_back(std::move(plan));
    return !writing_;
  }
  void Close() override {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;  // why: no plan will be pushed any more
  }
  void Flush() override {
    std::lock_guard<std::mutex> l(mu_);
    StartNextLocked();
  }
  void WriteDone(bool ok) {
    std::lock_guard<std::mutex> l(mu_);
    writing_ = false;
    if (!queue_.empty()) queue_.pop_front();
    if (!ok) queue_.clear();  // why: the client is gone; nothing more can be written
    if (!ok) write_failed_ = true;
    StartNextLocked();
  }
  // Reading has stopped: finish with `status` once the queue is drained.
  void ReadsDone(grpc::Status status) {
    std::lock_guard<std::mutex> l(mu_);
    reads_done_ = true;
    status_ = std::move(status);
    StartNextLocked();
  }
  void Detach() {
    std::lock_guard<std::mutex> l(mu_);
    reactor_ = nullptr;
  }

 private:
  // Starts the next write, or finishes the stream when nothing is left.
  void StartNextLocked() {
    if (finished_ || writing_ || reactor_ == nullptr) return;
    if (!queue_.empty() && !write_failed_) {
      writing_ = true;
      EncodeResponse(*queue_.front(), &out_);
      reactor_->StartWrite(&out_);
      return;
    }
    // Finish only once the sink is closed (by JobState, or by TrainStream
    // when the stream never attached): no plan can follow.
    if (reads_done_ && (closed_ || write_failed_)) {
      finished_ = true;
      reactor_->Finish(status_);
    }
  }

  std::mutex mu_;
  TrainReactor* reactor_;
  std::deque<PlanPtr> queue_;  // front() is being written while writing_
  grpc::ByteBuffer out_;       // ... serialized
  bool writing_ = false;
  bool closed_ = false;
  bool reads_done_ = false;
  bool write_failed_ = false;
  bool finished_ = false;
  grpc::Status status_;
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
  writer_->ReadsDone(ToGrpc(step.status));
}

void TrainReactor::OnWriteDone(bool ok) { writer_->WriteDone(ok); }

void TrainReactor::OnDone() {
  writer_->Detach();
  delete this;
}

}  // namespace psync::server
