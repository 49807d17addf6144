#include "client/relay/upstream_stream.h"

#include <utility>

#include "absl/strings/str_join.h"
#include "common/grpc_client.h"
#include "common/grpc_status.h"
#include "psync/common/logging.h"

namespace psync::relay {

void RelayCounters::Add(const RelayStats& d) {
  std::lock_guard<std::mutex> l(mu_);
  total_.upstream_streams += d.upstream_streams;
  total_.report_batches += d.report_batches;
  total_.reports += d.reports;
  total_.plans_in += d.plans_in;
  total_.plans_out += d.plans_out;
}

RelayStats RelayCounters::Get() const {
  std::lock_guard<std::mutex> l(mu_);
  return total_;
}

UpstreamStream::UpstreamStream(const UpstreamTarget& target, std::string job_id, int64_t generation,
                               std::shared_ptr<HostBatcher> batcher)
    : target_(target), job_id_(std::move(job_id)), generation_(generation), batcher_(std::move(batcher)) {}

UpstreamStream::~UpstreamStream() {
  if (sender_.joinable() || reader_.joinable()) {
    Cancel();
    Join();
  }
}

void UpstreamStream::Start() {
  sender_ = std::thread([this] { RunSender(); });
}

void UpstreamStream::Cancel() {
  batcher_->Cancel();
  std::lock_guard<std::mutex> l(mu_);
  cancelled_ = true;
  if (ctx_) ctx_->TryCancel();
}

void UpstreamStream::Join() {
  if (sender_.joinable()) sender_.join();
  if (reader_.joinable()) reader_.join();
}

void UpstreamStream::RunSender() {
  SendStep step = batcher_->WaitNext();
  // Anything but kOpen first: forming ended without a stream (the batcher
  // has ended its local streams).
  bool ok = step.kind == SendStep::kOpen && Open(step.ranks);
  while (ok) {
    step = batcher_->WaitNext();
    if (step.kind == SendStep::kStop) break;
    if (step.kind == SendStep::kHalfClose) {
      stream_->WritesDone();
      break;
    }
    for (UpMessage& m : step.messages) {
      if (m.up.has_report_batch()) {
        target_.counters->Add({/*upstream_streams=*/0, /*report_batches=*/1, m.up.report_batch().reports_size()});
      }
      ok = stream_->Write(m.up);
      if (!ok) break;
      if (m.end_rank >= 0) batcher_->DoneWritten(m.end_rank);
    }
  }
  MarkSenderDone();
}

bool UpstreamStream::Open(const std::vector<int>& ranks) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (cancelled_) {
      batcher_->End(absl::UnavailableError("psync-relay is shutting down"));
      return false;
    }
    ctx_ = std::make_unique<grpc::ClientContext>();
    AddBearerToken(ctx_.get(), target_.token);
  }
  target_.counters->Add({/*upstream_streams=*/1});
  PSYNC_LOG(INFO) << "psync-relay: host stream for ranks " << absl::StrJoin(ranks, ",") << " (generation "
                  << generation_ << ") to " << target_.address;
  stream_ = target_.stub->Train(ctx_.get());
  v1::TrainUp hello;
  hello.mutable_hello()->set_job_id(job_id_);
  hello.mutable_hello()->set_generation(generation_);
  for (int r : ranks) hello.mutable_hello()->add_ranks(r);
  const bool ok = stream_->Write(hello);
  // Started either way: it reads the stream's end and ends the local streams with it.
  reader_ = std::thread([this] { RunReader(); });
  return ok;
}

void UpstreamStream::MarkSenderDone() {
  std::lock_guard<std::mutex> l(mu_);
  sender_done_ = true;
  cv_.notify_all();
}

void UpstreamStream::RunReader() {
  v1::Plan p;
  while (stream_->Read(&p)) {
    auto plan = std::make_shared<const v1::Plan>(p);
    const std::vector<std::shared_ptr<LocalSink>> to = batcher_->Recipients(*plan);
    // Counted before the writes start, so a worker holding the plan sees it counted.
    target_.counters->Add({/*upstream_streams=*/0, /*report_batches=*/0, /*reports=*/0, /*plans_in=*/1,
                           /*plans_out=*/static_cast<int64_t>(to.size())});
    for (const auto& sink : to) sink->Push(plan);
  }
  batcher_->Stop();
  {
    // Why wait: Finish may not run while the sender still writes.
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return sender_done_; });
  }
  const grpc::Status st = stream_->Finish();
  if (!st.ok()) {
    PSYNC_LOG(WARNING) << "psync-relay: host stream (generation " << generation_ << ") ended: " << st.error_message();
  }
  // Why the same status: each worker sees what it would have seen on its own stream.
  batcher_->End(FromGrpcStatus(st));
}

}  // namespace psync::relay
