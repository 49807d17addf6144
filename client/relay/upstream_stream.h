// UpstreamStream: one host stream from psync-relay to the coordinator, the
// gRPC side of a HostBatcher. Two threads: the sender waits for the batcher
// to form, opens the stream with Hello{ranks} and writes what the batcher
// hands it (reports, heartbeats, Done, RankClosed), then half-closes; the
// reader fans each Plan out to the local streams the batcher names and, when
// the stream ends, ends them with its status. Every rule is the batcher's.
//
// Threads: the two above; Cancel and Join from the relay. mu_ guards ctx_,
// cancelled_ and sender_done_; stream_ is set by the sender before the
// reader starts and never changes after.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "client/relay/host_batcher.h"
#include "client/relay/plan_relay.h"
#include "psync/v1/coordinator.grpc.pb.h"

namespace psync::relay {

// The relay's counters (RelayStats), added to by every stream.
class RelayCounters {
 public:
  void Add(const RelayStats& delta);
  RelayStats Get() const;

 private:
  mutable std::mutex mu_;
  RelayStats total_;
};

// What every upstream stream of a relay shares.
struct UpstreamTarget {
  v1::Coordinator::Stub* stub = nullptr;
  std::string address;  // for logs
  std::string token;    // sent as "authorization: Bearer <token>" when set
  RelayCounters* counters = nullptr;
};

class UpstreamStream {
 public:
  UpstreamStream(const UpstreamTarget& target, std::string job_id, int64_t generation,
                 std::shared_ptr<HostBatcher> batcher);
  ~UpstreamStream();  // Cancel and Join, unless joined already
  UpstreamStream(const UpstreamStream&) = delete;
  UpstreamStream& operator=(const UpstreamStream&) = delete;

  const std::string& job_id() const { return job_id_; }
  int64_t generation() const { return generation_; }
  const std::shared_ptr<HostBatcher>& batcher() const { return batcher_; }

  // Starts the sender (the reader starts once the stream is open).
  void Start();
  // Ends the stream: the batcher stops, the call is cancelled.
  void Cancel();
  void Join();

 private:
  void RunSender();
  // Makes the call and writes Hello{ranks}; false when it cannot.
  bool Open(const std::vector<int>& ranks);
  void RunReader();
  void MarkSenderDone();

  const UpstreamTarget target_;
  const std::string job_id_;
  const int64_t generation_;
  const std::shared_ptr<HostBatcher> batcher_;

  std::mutex mu_;
  std::condition_variable cv_;  // the reader waits for sender_done_ before Finish
  bool cancelled_ = false;
  bool sender_done_ = false;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::TrainUp, v1::Plan>> stream_;
  std::thread sender_, reader_;
};

}  // namespace psync::relay
