// One local worker's Train stream at psync-relay: a single-rank stream, as
// at the coordinator. LocalStream reads the hello (which registers the rank
// with a HostBatcher), then reports, heartbeats and Done, and hands them to
// that batcher; its LocalWriter (a LocalSink) writes the plans the batcher
// routes to it, one at a time, and ends the stream.
//
// Threads: gRPC's callback threads run the reactor; nothing blocks there.
// The LocalWriter is shared by the reactor and the batcher; its own mutex
// guards its queue.
#pragma once

#include <memory>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "client/relay/host_batcher.h"
#include "psync/v1/coordinator.grpc.pb.h"

namespace psync::relay {

// Where a local rank's hello goes (PlanRelay): the batcher that carries the
// rank, or why it cannot be carried.
class RankRegistry {
 public:
  virtual ~RankRegistry() = default;
  virtual absl::StatusOr<std::shared_ptr<HostBatcher>> Register(const v1::Hello& hello,
                                                                std::shared_ptr<LocalSink> sink) = 0;
};

class LocalWriter;

// Raw messages both ways, as at the coordinator: a message that does not
// decode as a TrainUp is a protocol error (INVALID_ARGUMENT to the worker,
// RankClosed "protocol error: undecodable message" upstream), not the end
// of the stream.
class LocalStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Deletes itself when gRPC is done with it. (The token is checked before
  // the stream reaches it: PlanRelay serves through common/token_gate.h.)
  explicit LocalStream(RankRegistry* registry);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  void OnHello();
  void OnMessage();
  // Reading stops on a protocol violation: the rank is lost upstream with
  // `cause`, the worker's stream ends with INVALID_ARGUMENT `message`.
  void Violation(const std::string& cause, const std::string& message);

  RankRegistry* const registry_;
  std::shared_ptr<LocalWriter> writer_;
  std::shared_ptr<HostBatcher> batcher_;  // set by the hello
  grpc::ByteBuffer raw_;  // the message being read
  v1::TrainUp up_;        // ... decoded
  int rank_ = -1;
  bool done_ = false;
};

}  // namespace psync::relay
