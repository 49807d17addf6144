// TrainReactor: one worker's Train stream (coordinator.proto) on gRPC's
// callback API, or a host stream carrying several ranks of one host
// (hello.ranks; the ranks' membership is kept by JobState). Reads hello, then reports / heartbeats / done, and hands
// each to JobState; writes the rank's plans as JobState delivers them. No
// thread of its own and none blocked: gRPC calls its reactions on its
// callback threads, JobState pushes plans from whichever thread completed
// an iteration, and the writes start from there (PlanSink::Flush).
//
// The stream ends (Finish) once reading has stopped (the client half-closed
// or went away, sent Done, or broke the protocol: then with that status) and
// every plan queued before JobState closed the rank's sink has been written.
//
// Threads / ownership: the reactor deletes itself in OnDone. Its write side
// (Writer: queue, in-flight flag, finish state) is shared with JobState
// through a shared_ptr and guarded by Writer::mu_; lock order is JobState's
// lock, then Writer::mu_ (never the reverse: JobState is never called with
// Writer::mu_ held).
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "psync/v1/coordinator.pb.h"
#include "server/auth.h"
#include "server/job_state.h"

namespace psync::server {

class TrainReactor final : public grpc::ServerBidiReactor<v1::TrainUp, v1::Plan> {
 public:
  TrainReactor(grpc::CallbackServerContext* ctx, JobState* job, const TokenAuth* auth);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  class Writer;
  // Stops reading: tells JobState (once attached) and finishes when drained.
  void StopReading(const std::string& cause, grpc::Status status);

  grpc::CallbackServerContext* const ctx_;
  JobState* const job_;
  std::shared_ptr<Writer> writer_;
  v1::TrainUp up_;  // the message being read (one read at a time)
  int rank_ = -1;   // -1 until hello attached the stream (and on a host stream)
  bool host_ = false;  // a host stream (hello.ranks): its ranks are JobState's (RankRuntime::stream)
  int64_t generation_ = 0;  // the job generation of the hello (every call to JobState names it)
};

}  // namespace psync::server
