#include "server/train_reactor.h"

#include <deque>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/grpc_status.h"

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
    closed_ = true;  // why: JobState sends this rank nothing more
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
  void SetAttached(bool attached) {
    std::lock_guard<std::mutex> l(mu_);
    attached_ = attached;
  }

 private:
  // Starts the next write, or finishes the stream when nothing is left.
  void StartNextLocked() {
    if (finished_ || writing_ || reactor_ == nullptr) return;
    if (!queue_.empty() && !write_failed_) {
      writing_ = true;
      reactor_->StartWrite(queue_.front().get());
      return;
    }
    // Finish only after JobState closed the sink (no plan can follow) or
    // when the stream was never attached (nothing can follow either).
    if (reads_done_ && (closed_ || write_failed_ || !attached_)) {
      finished_ = true;
      reactor_->Finish(status_);
    }
  }

  std::mutex mu_;
  bool attached_ = false;  // JobState holds this sink
  TrainReactor* reactor_;
  std::deque<PlanPtr> queue_;  // front() is being written while writing_
  bool writing_ = false;
  bool closed_ = false;
  bool reads_done_ = false;
  bool write_failed_ = false;
  bool finished_ = false;
  grpc::Status status_;
};

TrainReactor::TrainReactor(grpc::CallbackServerContext* ctx, JobState* job, const TokenAuth* auth)
    : ctx_(ctx), job_(job), writer_(std::make_shared<Writer>(this)) {
  grpc::Status st = auth->Check(ctx);
  if (!st.ok()) {
    writer_->ReadsDone(st);
    return;
  }
  StartRead(&up_);
}

void TrainReactor::StopReading(const std::string& cause, grpc::Status status) {
  if (host_) {
    // Why: every rank still on the host stream is lost with it (one loss naming them all).
    job_->HostStreamClosed(writer_.get(), generation_,
                           cause == "stream closed" ? "host Train stream closed"
                                                    : absl::StrCat("host Train stream: ", cause));
  } else if (rank_ >= 0) {
    job_->StreamClosed(rank_, generation_, cause);  // closes the sink
  }
  writer_->ReadsDone(std::move(status));
}

void TrainReactor::OnReadDone(bool ok) {
  if (!ok) {
    if (rank_ < 0 && !host_) {
      StopReading("", grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Train stream closed before hello"));
    } else {
      StopReading(ctx_->IsCancelled() ? "stream closed (cancelled)" : "stream closed", grpc::Status::OK);
    }
    return;
  }
  if (rank_ < 0 && !host_) {
    if (!up_.has_hello()) {
      StopReading("", grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "the first message on a Train stream must be hello{job_id, rank, generation}"));
      return;
    }
    writer_->SetAttached(true);  // before JobState can push to it
    absl::Status st = job_->Attach(up_.hello(), writer_);
    if (!st.ok()) {
      writer_->SetAttached(false);
      StopReading("", ToGrpc(st));
      return;
    }
    host_ = up_.hello().ranks_size() > 0;
    rank_ = host_ ? -1 : up_.hello().rank();
    generation_ = up_.hello().generation();
    StartRead(&up_);
    return;
  }
  absl::Status st;
  bool done = false;
  if (host_) {
    switch (up_.msg_case()) {
      case v1::TrainUp::kReportBatch:
        st = job_->ReportBatch(writer_.get(), generation_, up_.report_batch());
        break;
      case v1::TrainUp::kReport:
        st = job_->HostReport(writer_.get(), generation_, up_.report());
        break;
      case v1::TrainUp::kDone:
        // Why reading goes on: the stream still carries the host's other
        // ranks; it ends when the agent half-closes it.
        st = job_->HostDone(writer_.get(), generation_, up_.done());
        break;
      case v1::TrainUp::kHeartbeat:
        st = job_->HostHeartbeat(writer_.get(), generation_, up_.heartbeat());
        break;
      case v1::TrainUp::kRankClosed:
        st = job_->RankClosed(writer_.get(), generation_, up_.rank_closed());
        break;
      case v1::TrainUp::kHello:
        st = absl::InvalidArgumentError("hello sent twice on one Train stream");
        break;
      default:
        st = absl::InvalidArgumentError(
            "empty TrainUp message (no report_batch, report, heartbeat, done or rank_closed)");
        break;
    }
    if (!st.ok()) {
      PSYNC_LOG(WARNING) << "host Train stream: " << st.message();
      StopReading(absl::StrCat("protocol error: ", st.message()), ToGrpc(st));
      return;
    }
    StartRead(&up_);
    return;
  }
  switch (up_.msg_case()) {
    case v1::TrainUp::kReport:
      st = job_->Report(rank_, generation_, up_.report());
      break;
    case v1::TrainUp::kDone:
      st = job_->Done(rank_, generation_, up_.done());
      done = true;
      break;
    case v1::TrainUp::kHeartbeat:
      st = job_->Heartbeat(rank_, generation_, up_.heartbeat());
      break;
    case v1::TrainUp::kHello:
      st = absl::InvalidArgumentError("hello sent twice on one Train stream");
      break;
    case v1::TrainUp::kReportBatch:
    case v1::TrainUp::kRankClosed:
      st = absl::InvalidArgumentError(
          "report_batch and rank_closed are for host streams only (hello.ranks); this is the Train stream of "
          "one rank");
      break;
    default:
      st = absl::InvalidArgumentError("empty TrainUp message (no hello, report, heartbeat or done)");
      break;
  }
  if (!st.ok()) {
    PSYNC_LOG(WARNING) << "rank " << rank_ << ": " << st.message();
    StopReading(absl::StrCat("protocol error: ", st.message()), ToGrpc(st));
    return;
  }
  if (done) {
    StopReading("stream closed", grpc::Status::OK);
    return;
  }
  StartRead(&up_);
}

void TrainReactor::OnWriteDone(bool ok) { writer_->WriteDone(ok); }

void TrainReactor::OnDone() {
  writer_->Detach();
  delete this;
}

}  // namespace psync::server
