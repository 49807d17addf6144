// JobSession: this worker's membership in the job, from Join to Done.
//
// Start: connect to the coordinator, Join with the model's manifest (rank,
// world size, store prefix, initial bucket plan, plan lookahead, every
// rank's host id), learn which ranks share this host, pick the backend
// (--backend, comm/backend_choice.h), create the process group through the
// coordinator's store, open the Train stream (its plans go straight into the
// session's PlanMailbox) and start the failure watchdog.
// Finish: stop the watchdog, send Done with the exit code and reason, close.
//
// Threads: the training thread owns the session; the client's stream reader
// and heartbeat and the watchdog run on threads of their own
// (coordinator_client.h, failure_watchdog.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "psync/autograd/variable.h"
#include "psync/comm/process_group.h"
#include "psync/control/session_options.h"
#include "worker/control/plan_mailbox.h"
#include "worker/control/report_channel.h"
#include "psync/ddp/ddp.h"
#include "worker/ddp/bucket_assignment.h"

namespace psync::control {

class JobSession {
 public:
  // Errors carry their exit code (include/psync/common/exit_code.h): kExitRendezvous when
  // the coordinator or the peers cannot be reached or refuse, kExitBadInput
  // for a host layout or backend the flags make impossible.
  static absl::StatusOr<std::unique_ptr<JobSession>> Start(
      const SessionOptions& opt, Device device, const std::vector<std::pair<std::string, autograd::Variable>>& params,
      const StartOffer& start = {});
  // Live recovery: Start for a process that stays after its generation
  // ended (offer.generation: the one to join, offer.live_step: the steps its
  // state completed; none: as a fresh process). When the generation joined
  // cannot build its group because another peer was lost meanwhile, that
  // generation ends too and a process holding state joins the next one
  // (whichever forms), up to kRejoinAttempts times; not after a refusal (the
  // job is over, a bad token) or with nothing to keep.
  static constexpr int kRejoinAttempts = 10;
  static absl::StatusOr<std::unique_ptr<JobSession>> Rejoin(
      const SessionOptions& opt, Device device, const std::vector<std::pair<std::string, autograd::Variable>>& params,
      StartOffer offer);
  ~JobSession();
  JobSession(const JobSession&) = delete;
  JobSession& operator=(const JobSession&) = delete;

  int rank() const;
  int world_size() const;
  int64_t generation() const;
  // The iteration every rank starts at (JoinResponse.start_iteration): with
  // StartOffer::agree the checkpoint step to load now (0: none).
  int64_t start_iteration() const;
  // Live recovery: the rank whose training state every rank takes before
  // the first iteration (JoinResponse.heal_source); -1 = none (each rank's
  // own state, or the agreed checkpoint, is the start).
  int heal_source() const;
  int plan_lookahead() const;
  // Live recovery: whether a lost rank's survivors stay (--recovery=live),
  // and the ring distance at which each rank keeps a copy of its sharded
  // optimizer state (--zero): the shortest one putting every rank's copy on
  // another host, 1 on one host.
  bool live_recovery() const;
  int replica_distance() const;
  const std::string& backend() const;         // the group's: gloo, shm, hier or nccl
  const std::string& backend_reason() const;  // why --backend chose it
  const ddp::BucketPlan& initial_bucket_plan() const;  // empty: the reducer's own
  std::shared_ptr<comm::ProcessGroup> group() const;
  std::shared_ptr<PlanMailbox> mailbox() const;
  ReportChannel* reports() const;

  // The data-parallel layer over this session's group: the coordinator
  // announces the bucket layout (options.rebuild becomes kExternal; the
  // initial bucket plan is applied here) and each iteration's globally
  // unused parameters. Errors carry their exit code: the job's failure
  // when it failed meanwhile (DDP's set-up broadcast is a collective), else
  // kExitRendezvous; kExitInternal for a bucket plan that does not apply.
  absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> MakeDdp(std::shared_ptr<nn::Module> module,
                                                                        ddp::DdpOptions options) const;

  // Stops the watchdog, sends Done{reason, code} and closes the stream.
  // Idempotent (the destructor calls it with the last code given, or 1).
  void Finish(int code, const std::string& reason);
  // Live recovery: after a failure with exit code `code`, the generation
  // the coordinator asked this process to rejoin (the ABORT plan's
  // rejoin_generation, waited for up to 3 s: the data plane may fail a
  // moment before the plan arrives); 0: none, exit as usual. Only for a
  // peer lost (4) or a set-up refused because of one (3), never this
  // process's own cause. Also 0, with a warning, where the state cannot be
  // healed in process: `zero_stage` > 0 without `zero_replicas` (the lost
  // rank took its optimizer shard along; with replicas, optim/
  // shard_records.h, it is rebuilt) or a CUDA device (the heal moves host
  // tensors); the job then resumes from its newest checkpoint.
  int64_t RejoinGeneration(int code, int zero_stage, bool zero_replicas = false) const;
  // Live recovery: stops the watchdog and closes the stream without Done
  // (the coordinator ended this generation already; a Done would only be
  // refused). The process goes on in the next session.
  void Leave();

 private:
  struct State;
  explicit JobSession(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace psync::control
