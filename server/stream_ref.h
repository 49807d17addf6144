// StreamRef: how JobState's stream calls name an attached Train stream.
// JobState::Attach returns it; the caller (TrainStream, tests, the fuzzer)
// passes it back with each message. A rank's own stream (hello.rank) is a
// host stream of one rank whose messages need not name their rank; a host
// stream (hello.ranks) carries several ranks of one host, each message
// naming its rank. JobState checks every message against its own record of
// which stream each rank is on, so a StreamRef grants nothing by itself.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/v1/coordinator.pb.h"
#include "server/plan_sink.h"

namespace psync::server {

struct StreamRef {
  const PlanSink* sink = nullptr;  // the stream's identity (never dereferenced)
  int64_t generation = 0;          // of its hello
  int own_rank = -1;               // a rank's own stream: that rank; -1 = a host stream
  bool host() const { return own_rank < 0; }
};

// The ranks `hello` binds: hello.rank, or hello.ranks (1..world of them,
// each in range, none twice). InvalidArgument names the field and the rank.
absl::StatusOr<std::vector<int>> HelloRanks(const v1::Hello& hello, int world);

// OK on a host stream; InvalidArgument for `what` (report_batch,
// rank_closed: host streams only) on a rank's own stream.
absl::Status CheckHostStream(const StreamRef& stream, const char* what);

}  // namespace psync::server
