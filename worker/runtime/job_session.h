// JobSession: this worker's membership in the job, from Join to Done.
//
// Start: connect to the coordinator, Join with the model's manifest (rank,
// world size, store prefix, initial bucket plan, plan lookahead, every
// rank's host id), learn which ranks share this host, pick the backend
// (--backend, comm/backend_choice.h), create the process group through the
// coordinator's store, open the Train stream and start the plan pump.
// Finish: stop the pump, send Done with the exit code and reason, close.
//
// Threads: the training thread owns the session; the plan pump and the
// client's heartbeat run on threads of their own (plan_pump.h,
// coordinator/coordinator_client.h).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/autograd/variable.h"
#include "worker/comm/process_group.h"
#include "worker/ddp/bucket_assignment.h"
#include "worker/runtime/plan_source.h"
#include "worker/runtime/trainer.h"
#include "worker/runtime/worker_flags.h"

namespace psync::runtime {

class JobSession {
 public:
  // Errors carry their exit code (exit_codes.h): kExitRendezvous when the
  // coordinator or the peers cannot be reached or refuse, kExitBadInput for
  // a host layout or backend the flags make impossible.
  static absl::StatusOr<std::unique_ptr<JobSession>> Start(
      const WorkerOptions& opt, Device device, const std::vector<std::pair<std::string, autograd::Variable>>& params,
      int64_t start_iteration = 0);
  ~JobSession();
  JobSession(const JobSession&) = delete;
  JobSession& operator=(const JobSession&) = delete;

  int rank() const;
  int world_size() const;
  int64_t generation() const;
  int plan_lookahead() const;
  const std::string& backend() const;         // the group's: gloo, shm, hier or nccl
  const std::string& backend_reason() const;  // why --backend chose it
  const ddp::BucketPlan& initial_bucket_plan() const;  // empty: the reducer's own
  std::shared_ptr<comm::ProcessGroup> group() const;
  std::shared_ptr<PlanMailbox> mailbox() const;
  ReportChannel* reports() const;
  const std::atomic<int>* fatal_code() const;

  // Stops the plan pump, sends Done{reason, code} and closes the stream.
  // Idempotent (the destructor calls it with the last code given, or 1).
  void Finish(int code, const std::string& reason);

 private:
  struct State;
  explicit JobSession(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace psync::runtime
