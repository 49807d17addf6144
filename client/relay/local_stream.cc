#include "client/relay/local_stream.h"

#include <deque>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace psync::relay {

// The write side of one local worker's stream: plans written one at a time,
// then the end of the stream (Finish) once the queue is drained.
class LocalWriter final : public LocalSink {
 public:
  explicit LocalWriter(grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* r) : r_(r) {}

  void Push(std::shared_ptr<const v1::Plan> plan) override {
    std::lock_guard<std::mutex> l(mu_);
    if (end_ || failed_) return;
    q_.push_back(std::move(plan));
    StartNextLocked();
  }
  void End(const absl::Status& status) override {
    std::lock_guard<std::mutex> l(mu_);
    if (end_) return;
    end_ = true;
    // Same code, same message: the worker sees what the coordinator said.
    st_ = status.ok() ? grpc::Status::OK
                      : grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
    StartNextLocked();
  }
  void WriteDone(bool ok) {
    std::lock_guard<std::mutex> l(mu_);
    writing_ = false;
    if (!q_.empty()) q_.pop_front();
    if (!ok) {
      failed_ = true;  // why: the worker is gone; nothing more can be written
      q_.clear();
    }
    StartNextLocked();
  }
  void Detach() {
    std::lock_guard<std::mutex> l(mu_);
    r_ = nullptr;
  }

 private:
  void StartNextLocked() {
    if (r_ == nullptr || writing_ || finished_) return;
    if (!q_.empty() && !failed_) {
      writing_ = true;
      bool own = false;
      out_.Clear();  // Serialize needs an empty buffer
      (void)grpc::SerializationTraits<v1::Plan>::Serialize(*q_.front(), &out_, &own);
      r_->StartWrite(&out_);
      return;
    }
    if (end_) {
      finished_ = true;
      r_->Finish(st_);
    }
  }

  std::mutex mu_;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* r_;
  std::deque<std::shared_ptr<const v1::Plan>> q_;  // front() is being written while writing_
  grpc::ByteBuffer out_;                           // ... serialized
  bool writing_ = false, end_ = false, failed_ = false, finished_ = false;
  grpc::Status st_;
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
