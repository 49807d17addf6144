#include "server/train_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "psync/common/logging.h"

namespace psync::server {

TrainStream::TrainStream(JobState* job, std::shared_ptr<PlanSink> sink) : job_(job), sink_(std::move(sink)) {}

TrainStream::Step TrainStream::Receive(const v1::TrainUp& up) {
  if (!stream_) return Hello(up);
  if (absl::Status st = Dispatch(up); !st.ok()) {
    PSYNC_LOG(WARNING) << Name() << ": " << st.message();
    return End(absl::StrCat("protocol error: ", st.message()), st);
  }
  // Why: Done ends a rank's own stream; a host stream still carries the
  // host's other ranks and ends when its agent half-closes it.
  if (up.has_done() && !stream_->host()) return End("stream closed", absl::OkStatus());
  return Step{true, absl::OkStatus()};
}

TrainStream::Step TrainStream::InputEnded(bool cancelled) {
  if (!stream_) return End("", absl::InvalidArgumentError("Train stream closed before hello"));
  return End(cancelled ? "stream closed (cancelled)" : "stream closed", absl::OkStatus());
}

TrainStream::Step TrainStream::Undecodable(const std::string& why) {
  absl::Status st = absl::InvalidArgumentError(absl::StrCat("undecodable message on the Train stream: ", why));
  if (stream_) PSYNC_LOG(WARNING) << Name() << ": " << st.message();
  // Why this cause: the other ranks' ABORT says what broke, not "stream closed".
  return End("protocol error: undecodable message", std::move(st));
}

TrainStream::Step TrainStream::Hello(const v1::TrainUp& up) {
  if (!up.has_hello()) {
    return End("", absl::InvalidArgumentError(
                       "the first message on a Train stream must be hello{job_id, rank, generation}"));
  }
  absl::StatusOr<StreamRef> attached = job_->Attach(up.hello(), sink_);
  if (!attached.ok()) return End("", attached.status());
  stream_ = *attached;
  return Step{true, absl::OkStatus()};
}

absl::Status TrainStream::Dispatch(const v1::TrainUp& up) {
  const StreamRef& s = *stream_;
  switch (up.msg_case()) {
    case v1::TrainUp::kReport:
      return job_->Report(s, up.report());
    case v1::TrainUp::kReportBatch:
      return job_->ReportBatch(s, up.report_batch());
    case v1::TrainUp::kDone:
      return job_->Done(s, up.done());
    case v1::TrainUp::kHeartbeat:
      return job_->Heartbeat(s, up.heartbeat());
    case v1::TrainUp::kRankClosed:
      return job_->RankClosed(s, up.rank_closed());
    case v1::TrainUp::kHello:
      return absl::InvalidArgumentError("hello sent twice on one Train stream");
    default:
      return absl::InvalidArgumentError(
          s.host() ? "empty TrainUp message (no report_batch, report, heartbeat, done or rank_closed)"
                   : "empty TrainUp message (no hello, report, heartbeat or done)");
  }
}

TrainStream::Step TrainStream::End(const std::string& cause, absl::Status status) {
  if (!stream_) {
    sink_->Close();  // JobState never held it: no plan can come
  } else if (!stream_->host()) {
    job_->StreamClosed(*stream_, cause);
  } else {
    // Why: every rank still on the host stream is lost with it (one loss naming them all).
    job_->StreamClosed(*stream_, cause == "stream closed" ? std::string("host Train stream closed")
                                                          : absl::StrCat("host Train stream: ", cause));
  }
  return Step{false, std::move(status)};
}

std::string TrainStream::Name() const {
  return stream_->host() ? std::string("host Train stream") : absl::StrCat("rank ", stream_->own_rank);
}

}  // namespace psync::server
