// TrainStream: the Train protocol of one stream (coordinator.proto "Train
// stream", "Host streams"), without gRPC. The first message must be hello,
// which attaches the stream to its rank (hello.rank) or to its host's ranks
// (hello.ranks); every later message goes to JobState's one stream API. The
// stream ends after Done on a rank's own stream, at a protocol violation
// (the status names it), or when the client stops sending; its ranks still
// on it are then released (JobState::StreamClosed), so a stream that ends
// without Done loses them. TrainReactor (train_reactor.h) moves the bytes;
// this decides what they mean.
//
// Threads: one message at a time (gRPC runs one read reaction at a time per
// stream); no lock of its own. The sink is JobState's once attached; a
// stream that never attached closes it itself when it ends.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "psync/v1/coordinator.pb.h"
#include "server/job_state.h"
#include "server/plan_sink.h"
#include "server/stream_ref.h"

namespace psync::server {

class TrainStream {
 public:
  // What comes after a message.
  struct Step {
    bool read_more = false;
    absl::Status status;  // when !read_more: what the stream ends with (OK, or the violation)
  };

  // The stream's plans go to `sink` once hello attached it.
  TrainStream(JobState* job, std::shared_ptr<PlanSink> sink);

  // One message read from the client.
  Step Receive(const v1::TrainUp& up);
  // The client stopped sending (half-closed; `cancelled`: it went away).
  Step InputEnded(bool cancelled);
  // A message that does not decode as a TrainUp (or is over the size
  // limit: `why` says which): a protocol violation, like any other.
  Step Undecodable(const std::string& why);

 private:
  Step Hello(const v1::TrainUp& up);
  absl::Status Dispatch(const v1::TrainUp& up);
  // Reading stops: JobState hears `cause` (the loss message's reason if a
  // rank is still training), the stream finishes with `status`.
  Step End(const std::string& cause, absl::Status status);
  std::string Name() const;  // for logs

  JobState* const job_;
  std::shared_ptr<PlanSink> sink_;
  std::optional<StreamRef> stream_;  // set by hello
};

}  // namespace psync::server
