// PlanRelay: psync-relay's core, the host agent between one host's workers
// and the coordinator (coordinator.proto "Host streams"). It serves the
// Coordinator service's Train method only, on 127.0.0.1: each local worker
// (psync-worker --plan-relay=127.0.0.1:PORT) opens its Train stream here
// exactly as it would at the coordinator; Join and Store go straight to the
// coordinator. The relay carries the host's ranks on one upstream host
// stream per generation, so the coordinator reads one ReportBatch and
// writes one Plan per host per iteration instead of one per rank.
//
// Rules:
//   - Forming: the local Hellos of one generation are gathered until
//     `expect_ranks` of them arrived or `form_wait` passed since the first;
//     then one upstream stream opens with Hello{ranks}. A Hello after that
//     forms another upstream stream (same rules, for the ranks still expected).
//   - Reports: held per iteration until every live local rank of the stream
//     reported it, then sent as one ReportBatch; never held longer than
//     `max_hold` after the iteration's first report (then what is there goes
//     up). Holding never delays a plan: Plan{i} needs every rank's report of
//     i, so the coordinator waits for the missing local rank's report anyway;
//     the bound only keeps the coordinator's view of each rank (liveness
//     blame, loss and step time in psyncctl) current when a rank lags. A
//     rank's reports always go up in its order (batches in iteration order).
//   - Heartbeats go up as they come (they name their rank); Done goes up
//     naming its rank, after that rank's held reports, and the worker's
//     stream ends once it is written.
//   - A local stream that ends without Done: RankClosed{rank} goes up (after
//     that rank's held reports), so the coordinator handles the rank exactly
//     as if its own stream had closed (lost; the job aborts or restarts as
//     without the relay). Not after the stream already got an ABORT for
//     every rank (the generation is over; nothing is left to tell). One
//     that ends while its group still forms is left out of the group (and
//     its held reports with it): the coordinator blames the rank for never
//     attaching, as without the relay.
//   - Plans: each one the coordinator sends goes to every local stream of
//     the upstream stream, or only to those named in Plan.ranks.
//   - The upstream stream ending (the coordinator finished it, or it broke)
//     ends every local stream of it with the same status, after the plans
//     already queued for it, so a worker sees what it would have seen
//     without the relay. When every local rank is done or closed, the relay
//     half-closes the upstream stream.
//
// Where: the rules above are HostBatcher's (host_batcher.h, no gRPC); the
// local streams are LocalStream (local_stream.h), each upstream host stream
// an UpstreamStream (upstream_stream.h); PlanRelay starts the server and
// keeps one UpstreamStream (with its batcher) per forming or open group.
//
// Threads and ownership: the gRPC server's callback threads run the local
// streams' reactions (none blocks). Each upstream stream has two threads of
// its own: a sender (waits for its batcher to form, opens the stream,
// writes what the batcher hands it) and a reader (fans plans out to the
// local streams' write queues). One TimerQueue thread runs every batcher's
// deadlines (form_wait, max_hold). A batcher's state is guarded by its own
// mutex; the relay's list of groups by PlanRelay's (lock order: relay, then
// upstream stream, then batcher, then a local stream's write queue). Fixed cost per host: two
// threads per live generation, plus the timer thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace psync::relay {

struct RelayOptions {
  std::string upstream;          // the coordinator, HOST:PORT
  std::string token;             // the job's token: checked on local streams, sent upstream
  std::string tls_ca;            // PEM CA for the upstream connection (empty = plaintext)
  std::string listen_host = "127.0.0.1";
  int port = 0;                  // 0 = any free port
  int expect_ranks = 0;          // local ranks per generation (0 = unknown: form_wait decides)
  std::chrono::milliseconds form_wait{2000};
  std::chrono::microseconds max_hold{2000};
};

// Counters for tests and the bench (monotonic; read at any time).
struct RelayStats {
  int64_t upstream_streams = 0;   // host streams opened
  int64_t report_batches = 0;     // ReportBatch messages sent up
  int64_t reports = 0;            // reports inside them
  int64_t plans_in = 0;           // plans received from the coordinator
  int64_t plans_out = 0;          // plans written to local streams
};

class PlanRelay {
 public:
  // Starts serving; the upstream connection is made per generation, when
  // the first local stream of it forms (an unreachable coordinator ends the
  // local streams with UNAVAILABLE naming it).
  static absl::StatusOr<std::unique_ptr<PlanRelay>> Start(const RelayOptions& opt);
  ~PlanRelay();
  PlanRelay(const PlanRelay&) = delete;
  PlanRelay& operator=(const PlanRelay&) = delete;

  int port() const;
  RelayStats stats() const;
  // Stops serving: cancels the upstream streams, ends the local ones, joins
  // every thread. Idempotent.
  void Shutdown();

  struct Impl;

 private:
  explicit PlanRelay(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace psync::relay
