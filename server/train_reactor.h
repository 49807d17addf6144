// TrainReactor: one Train stream on gRPC's callback API: a worker's own, or
// a host stream carrying several ranks of one host (hello.ranks). It reads
// messages and hands each to TrainStream (train_stream.h: the protocol,
// without gRPC), and writes the plans JobState delivers to its Writer (the
// stream's PlanSink). No thread of its own and none blocked: gRPC calls its
// reactions on its callback threads, JobState pushes plans from whichever
// thread completed an iteration, and the writes start from there
// (PlanSink::Flush).
//
// The stream ends (Finish) once reading has stopped (TrainStream says so:
// the client half-closed or went away, sent Done on its own stream, or
// broke the protocol: then with that status) and every plan queued before
// the sink was closed has been written.
//
// Threads / ownership: the reactor deletes itself in OnDone. Its write side
// (Writer: queue, in-flight flag, finish state) is shared with JobState
// through a shared_ptr and guarded by Writer::mu_; lock order is JobState's
// lock, then Writer::mu_ (never the reverse: JobState is never called with
// Writer::mu_ held). The read side (TrainStream) runs in one read reaction
// at a time.
#pragma once

#include <memory>

#include <grpcpp/grpcpp.h>

#include "psync/v1/coordinator.pb.h"
#include "server/job_state.h"
#include "server/train_stream.h"

namespace psync::server {

// Raw messages both ways: a read that does not decode is a protocol error
// (TrainStream::Undecodable), not the end of the stream, which is all a
// typed read could report; plans are serialized as each write starts.
class TrainReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  TrainReactor(grpc::CallbackServerContext* ctx, JobState* job);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  class Writer;

  grpc::CallbackServerContext* const ctx_;
  std::shared_ptr<Writer> writer_;
  TrainStream stream_;
  grpc::ByteBuffer raw_;  // the message being read (one read at a time)
  v1::TrainUp up_;        // ... decoded
};

}  // namespace psync::server
