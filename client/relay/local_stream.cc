#include "client/relay/local_stream.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/grpc_write_queue.h"

namespace psync::relay {

// The write side of one local worker's stream, on the common write queue
// (common/grpc_write_queue.h): plans written one at a time, then the end of
// the stream once the queue is drained.
class LocalWriter final : public LocalSink {
 public:
  explicit LocalWriter(GrpcWriteQueue<v1::Plan>::Reactor* r) : queue_(r) {}

  void Push(std::shared_ptr<const v1::Plan> plan) override {
    if (queue_.Enqueue(std::move(plan))) queue_.Pump();
  }
  void End(const absl::Status& status) override {
    queue_.CloseInput();
    // Same code, same message: the worker sees what the coordinator said.
    queue_.FinishAfterDrain(ToGrpcStatus(status));
  }
  void WriteDone(bool ok) { queue_.OnWriteDone(ok); }
  void Detach() { queue_.Detach(); }

 private:
  GrpcWriteQueue<v1::Plan> queue_;
};

LocalStream::LocalStream(RankRegistry* registry) : registry_(registry), writer_(std::make_shared<LocalWriter>(this)) {
  StartRead(&raw_);
}

void LocalStream::OnReadDone(bool ok) {
  if (!ok) {
    // Why: the worker went away (or half-closed) without Done; the
    // coordinator must hear that this rank is lost, as without the relay.
    if (batcher_ && !done_) batcher_->Gone(rank_, "stream closed (relayed by psync-relay)");
    writer_->End(absl::OkStatus());
    return;
  }
  // Why the bound: a plan-relay message is a report or a heartbeat (the
  // coordinator's own limit for a Train message is the same 16 MiB).
  constexpr size_t kMaxMessageBytes = 16 << 20;
  const size_t bytes = raw_.Length();
  if (bytes > kMaxMessageBytes ||
      !grpc::SerializationTraits<v1::TrainUp>::Deserialize(&raw_, &up_).ok()) {
    Violation("protocol error: undecodable message",
              absl::StrCat("undecodable message on the Train stream through psync-relay: ", bytes,
                           " bytes that are not a psync.v1.TrainUp", bytes > kMaxMessageBytes ? " (over 16 MiB)" : ""));
    return;
  }
  if (!batcher_) {
    OnHello();
  } else {
    OnMessage();
  }
}

void LocalStream::OnHello() {
  if (!up_.has_hello() || up_.hello().ranks_size() > 0 || up_.hello().rank() < 0) {
    writer_->End(absl::InvalidArgumentError(
        "the first message on a Train stream through psync-relay must be hello{job_id, rank, generation} of one "
        "rank"));
    return;
  }
  absl::StatusOr<std::shared_ptr<HostBatcher>> b = registry_->Register(up_.hello(), writer_);
  if (!b.ok()) {
    writer_->End(b.status());
    return;
  }
  batcher_ = *b;
  rank_ = up_.hello().rank();
  StartRead(&raw_);
}

void LocalStream::OnMessage() {
  std::string bad;
  switch (up_.msg_case()) {
    case v1::TrainUp::kReport:
      batcher_->Report(rank_, up_.report());
      break;
    case v1::TrainUp::kHeartbeat:
      if (up_.heartbeat().rank() != rank_) {
        bad = absl::StrCat("heartbeat names rank ", up_.heartbeat().rank(), " on the Train stream of rank ", rank_);
      } else {
        batcher_->Heartbeat(up_.heartbeat());
      }
      break;
    case v1::TrainUp::kDone:
      done_ = true;
      batcher_->Done(rank_, up_.done());
      return;  // the batcher ends this stream once the Done is written upstream
    default:
      bad = "unexpected TrainUp message on a worker's Train stream (after hello: report, heartbeat or done)";
      break;
  }
  if (!bad.empty()) {
    Violation(absl::StrCat("protocol error: ", bad), bad);
    return;
  }
  StartRead(&raw_);
}

void LocalStream::Violation(const std::string& cause, const std::string& message) {
  // Why: a protocol violation loses the rank, as at the coordinator.
  if (batcher_ && !done_) batcher_->Gone(rank_, cause);
  writer_->End(absl::InvalidArgumentError(message));
}

void LocalStream::OnWriteDone(bool ok) { writer_->WriteDone(ok); }

void LocalStream::OnDone() {
  writer_->Detach();
  delete this;
}

}  // namespace psync::relay
