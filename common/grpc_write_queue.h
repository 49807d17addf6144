// GrpcWriteQueue: the write side of a server-side bidirectional stream on
// gRPC's callback API (raw ByteBuffers): messages are written one at a time
// in the order queued, and the stream ends (Finish) once it may and every
// message queued before that has been written. The coordinator's Train
// stream (server/train_reactor.cc) and psync-relay's local streams
// (client/relay/local_stream.cc) write their plans through it.
//
// When the stream ends: after CloseInput() (no message will follow) and
// FinishAfterDrain(status) (the status to end with; the first one counts),
// once the queue is drained -- or at once when a write failed (the client is
// gone: what is queued is dropped, and so is what is queued later).
//
// Back-pressure: none here; one write is in flight at a time, the rest wait
// in the queue (producers bound what they queue: a plan per iteration).
//
// Threads: every method may be called from any thread; mu_ guards all the
// state. Only Pump() and the methods that call it (OnWriteDone,
// FinishAfterDrain) start a write or Finish, so Enqueue and CloseInput may be
// called under a producer's lock that gRPC's threads must not wait for
// (JobState's: server/plan_sink.h). The reactor calls OnWriteDone from its
// OnWriteDone and Detach from its OnDone, before it deletes itself.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <utility>

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

namespace psync {

template <typename Msg>
class GrpcWriteQueue {
 public:
  using Reactor = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;

  explicit GrpcWriteQueue(Reactor* reactor) : reactor_(reactor) {}

  // Queues `msg`, or drops it once the input is closed, a write failed or
  // the stream ended. True when it was queued with no write in flight: the
  // caller must Pump() (after releasing its own locks) to start it.
  bool Enqueue(std::shared_ptr<const Msg> msg) {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_ || failed_ || finished_) return false;
    queue_.push_back(std::move(msg));
    return !writing_;
  }
  // No message will be queued any more. Starts nothing.
  void CloseInput() {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  // The stream may end with `status` once the input is closed and the queue
  // drained; the first status given is the one sent.
  void FinishAfterDrain(grpc::Status status) {
    std::lock_guard<std::mutex> l(mu_);
    if (!has_status_) {
      has_status_ = true;
      status_ = std::move(status);
    }
    StartNextLocked();
  }
  // Starts the next write, or ends the stream when it may.
  void Pump() {
    std::lock_guard<std::mutex> l(mu_);
    StartNextLocked();
  }
  // The reactor's OnWriteDone.
  void OnWriteDone(bool ok) {
    std::lock_guard<std::mutex> l(mu_);
    writing_ = false;
    if (!queue_.empty()) queue_.pop_front();
    if (!ok) {
      failed_ = true;  // why: the client is gone; nothing more can be written
      queue_.clear();
    }
    StartNextLocked();
  }
  // The reactor is done (OnDone): nothing may touch it any more.
  void Detach() {
    std::lock_guard<std::mutex> l(mu_);
    reactor_ = nullptr;
  }

 private:
  void StartNextLocked() {
    if (reactor_ == nullptr || writing_ || finished_) return;
    if (!queue_.empty() && !failed_) {
      writing_ = true;
      bool own = false;
      out_.Clear();  // Serialize needs an empty buffer
      (void)grpc::SerializationTraits<Msg>::Serialize(*queue_.front(), &out_, &own);
      reactor_->StartWrite(&out_);
      return;
    }
    if (has_status_ && (closed_ || failed_)) {
      finished_ = true;
      reactor_->Finish(status_);
    }
  }

  std::mutex mu_;
  Reactor* reactor_;                            // null after Detach
  std::deque<std::shared_ptr<const Msg>> queue_;  // front() is being written while writing_
  grpc::ByteBuffer out_;                        // ... serialized
  bool writing_ = false;
  bool closed_ = false;
  bool failed_ = false;
  bool has_status_ = false;
  bool finished_ = false;
  grpc::Status status_;
};

}  // namespace psync
