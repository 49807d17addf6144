// CoordinatorClient: the worker's side of the psync coordinator protocol
// (protos/psync/v1/coordinator.proto), with no gRPC or protobuf types in
// this header.
//
// Typical use in psync-worker (worker/control/job_session.h does this):
//
//   PSYNC_ASSIGN_OR_RETURN(auto client,
//       CoordinatorClient::Connect("10.0.0.1:29500", token, std::chrono::seconds(30)));
//   JoinRequest req;  req.job_id = "psync"; req.requested_rank = -1; req.manifest = {...};
//   PSYNC_ASSIGN_OR_RETURN(JoinResult joined, client->Join(req, std::chrono::seconds(300)));
//   CoordinatorStore store(client.get(), joined.store_prefix);  // for Gloo / NCCL bootstrap
//   auto plans = std::make_shared<PlanMailbox>();                // owned by the runtime
//   PSYNC_RETURN_IF_ERROR(client->OpenTrainStream(joined.rank, joined.generation, plans));
//   for (int64_t i = 0; ; ++i) {
//     forward ...
//     PSYNC_RETURN_IF_ERROR(client->SendReport({i, bitmap::Pack(used), loss, step_ms, ready_order}));
//     backward ...
//     PSYNC_ASSIGN_OR_RETURN(IterationPlan plan, plans->Wait(i, timeout));  // same plan on every rank
//     ... (an ABORT or a lost stream fails the wait: plans->failure() says why)
//     optimizer step; plans->Release(i);
//   }
//   (psync-worker waits less: only for Plan{i-K} before step i, see
//   plan_window.h and JoinResult::plan_lookahead.)
//   client->SendDone("completed", 0);
//   client->Close();
//
// Error codes (absl::Status):
//   Join: FailedPrecondition (wrong job / model / caps / backend / start
//         iteration, job aborted, a generation that ended),
//         AlreadyExists (duplicate rank), ResourceExhausted (world full),
//         DeadlineExceeded (world incomplete), Unauthenticated (token),
//         Unavailable ("coordinator at HOST:PORT unreachable: ...").
//   SendReport: Unavailable "coordinator at HOST:PORT lost: ..." when the
//         stream breaks (the server's status message is included, e.g. an
//         INVALID_ARGUMENT about the bitmap length).
//   The end of the Train stream closes the mailbox with why: Aborted when the
//         coordinator ended the stream because the job was aborted (exit code
//         4, include/psync/common/exit_code.h), Unavailable "coordinator at HOST:PORT lost:
//         ..." otherwise (exit code 5).
//
// Liveness: OpenTrainStream also starts a heartbeat thread that sends
// Heartbeat{rank, last reported iteration} every JoinResult.heartbeat_interval
// (set by the coordinator) until SendDone/Close, independent of the caller:
// a worker blocked in a collective keeps being heard, and the coordinator
// blames a rank whose messages stop. The channel uses gRPC keepalive (ping
// every 2 s, 3 s timeout, also without calls), so a connection that died
// without a TCP reset ends the Train stream (the mailbox fails: Unavailable
// "coordinator ... lost") within about 5 s.
//
// TLS: Connect with a CA file (PEM) uses TLS and trusts the certificates it
// holds (a self-signed server certificate itself works); without one the
// channel is plaintext.
//
// Threads: all methods are thread-safe. OpenTrainStream starts one reader
// thread, which decodes each incoming Plan into an IterationPlan and
// delivers it into the caller's PlanMailbox (no other queue: the plan goes
// straight to the runtime), and the heartbeat thread; SendReport/SendDone
// write from the caller's thread (serialized internally). Close() (or the
// destructor) ends the stream and joins both.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/common/bucket_packer.h"
#include "worker/control/plan_mailbox.h"
#include "worker/ddp/bucket_assignment.h"

namespace psync::control {

struct ParamSpec {
  std::string name;            // e.g. "layers.0.weight"
  std::vector<int64_t> shape;  // e.g. {64, 32}
  int element_size = 4;        // bytes per element
};

struct JoinRequest {
  std::string job_id = "psync";
  int requested_rank = -1;     // -1 = any free rank
  int world_size = 0;          // expected world size; 0 = accept the coordinator's
  std::string hostname;        // default: gethostname()
  std::string host_id;         // shared-memory domain (host_identity.h); empty = hostname
  int64_t pid = 0;             // default: getpid()
  std::string device = "cpu";
  std::string backend = "gloo";  // --backend as asked: auto, gloo, shm, hier or nccl (comm/backend_choice.h)
  std::vector<ParamSpec> manifest;  // registration order
  BucketCaps bucket_caps;      // same on every rank
  // The first iteration this worker will report: 0 for a fresh start, the
  // step of the checkpoint it resumes from. Every rank must send the same
  // value (else Join fails with FailedPrecondition naming both ranks); the
  // coordinator's plans for this generation start there.
  int64_t start_iteration = 0;
  // The resume agreement (coordinator.proto): true = the coordinator picks
  // the start iteration among every rank's checkpoint_steps (then
  // start_iteration stays 0) and returns it in JoinResult::start_iteration.
  bool agree_resume = false;
  std::vector<int64_t> checkpoint_steps;  // the checkpoints this worker can load
  // The job generation to join; 0 = whichever the coordinator is forming
  // (a fresh process: the usual case). A worker that rejoins in-process after
  // an ABORT would pass its old JoinResult::generation + 1; an older one is refused.
  int64_t generation = 0;
  // Live recovery: the steps this surviving process's in-memory state has
  // completed (JoinRequest.live_step); nullopt for a fresh process.
  std::optional<int64_t> live_step;
  // The examples of one optimizer step over the world (--global-batch; 0 =
  // not said): an elastic coordinator forms only worlds that split it.
  int64_t global_batch = 0;
  // The job's fingerprint (coordinator.proto, JoinRequest.settings): what
  // defines the job's math, as (name, value), each name once; the
  // coordinator refuses a rank whose settings differ from the first rank's.
  std::vector<std::pair<std::string, std::string>> settings;
};

struct JoinResult {
  int rank = -1;
  int world_size = 0;
  int64_t generation = 0;      // 1, 2, ... (coordinator.proto, "Generations"); pass to OpenTrainStream
  int64_t start_iteration = 0;  // the iteration every rank starts at (agreed: see JoinRequest::agree_resume)
  std::string store_prefix;    // prefix for every bootstrap store key
  ddp::BucketPlan initial_bucket_plan;  // manifest indices, bucket 0 first
  std::chrono::milliseconds heartbeat_interval{1000};  // from the coordinator
  int plan_lookahead = 1;      // K (coordinator.proto, "Plan lookahead")
  std::vector<std::string> host_ids;  // host_ids[r] = rank r's host id (JoinRequest.host_id)
  // Coordinator failover: the coordinator's epoch (JoinResponse.epoch).
  int64_t epoch = 0;
  // Live recovery: the rank whose training state every rank shares before
  // the first iteration (JoinResponse.heal_source); -1 = no healing.
  int heal_source = -1;
  // JoinResponse.live_recovery: survivors of a lost rank stay (--recovery=live).
  bool live_recovery = false;
};

struct Report {
  int64_t iteration = 0;
  std::string used_bitmap;     // bitmap::Pack(used): ceil(P/8) bytes, bit p = param p used
  double loss = 0;
  double last_step_ms = 0;
  std::vector<int> ready_order;  // rank 0, once (report of iteration 1); else empty
  double tokens_per_s = 0;     // this rank's tokens (examples) per second in the previous step; 0 = none yet
};

// Bitmaps: common/used_bitmap.h (byte p/8, bit p%8, LSB first).

class CoordinatorClient {
 public:
  // Creates a channel to `target` ("host:port") and waits up to `timeout`
  // for it to connect. `token` may be empty. `tls_ca_file` (PEM) empty =
  // plaintext; else TLS trusting that CA / certificate (InvalidArgument
  // naming the file when it cannot be read or holds no PEM certificate).
  // Unavailable names the target (and TLS, if used: a plaintext server or a
  // certificate the CA does not vouch for fails here too).
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const std::string& target, const std::string& token, std::chrono::milliseconds timeout,
      const std::string& tls_ca_file = "");
  ~CoordinatorClient();

  const std::string& target() const;

  // Blocks until the world is complete (the coordinator's --join-timeout) or `timeout`.
  absl::StatusOr<JoinResult> Join(const JoinRequest& req, std::chrono::milliseconds timeout);

  // Bootstrap store (keys are used as given: add the store prefix yourself,
  // or use CoordinatorStore). StoreGet waits up to `timeout` for the key.
  absl::Status StoreSet(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> StoreGet(const std::string& key, std::chrono::milliseconds timeout);

  // Opens the Train stream at `relay_target` (a host's psync-relay,
  // client/relay/README.md: plaintext on 127.0.0.1, the same token) instead
  // of the coordinator; Join and the store still go to the coordinator. Call
  // before OpenTrainStream; Unavailable naming the relay when it is not
  // reachable within `timeout`. Without it the stream goes to the coordinator.
  absl::Status UseTrainRelay(const std::string& relay_target, std::chrono::milliseconds timeout);
  // Coordinator failover (coordinator.proto): with `grace` > 0 (call before
  // OpenTrainStream), a Train stream lost to the coordinator's death or a
  // broken link is not the end. The reader reconnects with bounded backoff
  // (100 ms doubling to 1 s) for up to `grace` and re-registers with a
  // Resume; reports and heartbeats meanwhile are kept (reports back to two
  // lookaheads before the next plan, so the next coordinator gets them
  // again), plans already held are dropped when they come again, and a plan
  // of an older coordinator epoch than one obeyed ends that stream (it was
  // replaced). Only once `grace` passed does the mailbox close (Unavailable
  // "coordinator at HOST:PORT lost: no coordinator took over ...", exit 5).
  // SendDone with exit code 0 between streams waits up to `grace` for the
  // next one. Behind a plan relay (UseTrainRelay) the new stream goes
  // straight to the coordinator (a relay's host stream cannot resume).
  void RideThroughLoss(std::chrono::milliseconds grace);
  // Opens the Train stream and sends Hello; starts the reader thread, which
  // delivers every plan into `plans` (decoded for the manifest Join sent:
  // globally_unused has one entry per parameter) and closes it with why
  // when the stream ends.
  absl::Status OpenTrainStream(int rank, int64_t generation, std::shared_ptr<PlanMailbox> plans);
  absl::Status SendReport(const Report& report);
  // Sends Done and half-closes the stream; waits briefly for the server to finish it.
  absl::Status SendDone(const std::string& exit_reason, int exit_code = 0);
  // Cancels the stream if still open and joins the reader and heartbeat
  // threads. Idempotent.
  void Close();

  struct Impl;

 private:
  explicit CoordinatorClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace psync::control
