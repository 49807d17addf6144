// Job: a program's own training loop in a psync job, as with PyTorch DDP.
//
//   psync::control::JobOptions opt;          // coordinator, job id, backend, DDP options...
//   PSYNC_ASSIGN_OR_RETURN(auto job, psync::control::Job::Join(opt, model));
//   // job->rank(), job->world_size(): this rank's part of the data
//   optim::SGD sgd(model->named_parameters(), {});
//   for (int64_t it = job->start_iteration(); it < steps; ++it) {
//     PSYNC_ASSIGN_OR_RETURN(bool go, job->BeginIteration(it));
//     if (!go) break;                        // psyncctl shutdown: every rank stops before the same iteration
//     PSYNC_ASSIGN_OR_RETURN(Variable loss, job->Forward([&] { return nn::MseLoss(model->Forward(x), y); }));
//     PSYNC_RETURN_IF_ERROR(autograd::Backward(loss));   // gradients averaged over the ranks
//     PSYNC_RETURN_IF_ERROR(sgd.Step(0.1));
//     sgd.ZeroGrad();
//   }
//   return job->Finish(absl::OkStatus());    // Done to the coordinator
//
// Join connects to the coordinator (psync-coordinator), joins the job
// (rank, world size and every rank's host from the rendezvous), builds the
// process group (opt.session.backend: gloo, shm, hier or nccl) and wraps the
// module in DistributedDataParallel with rank 0's parameters broadcast.
//
// Per iteration, the coordinator's protocol (docs/architecture.md, "The
// control path"): BeginIteration takes the plans the iteration needs (the
// coordinator runs up to plan_lookahead() iterations behind) and says
// whether to run it; Forward runs the forward through DDP and reports the
// iteration (which parameters it used, the last iteration's loss and time),
// so the coordinator's plan (the globally unused parameters, a new bucket
// layout, a stop) overlaps backward. A stop (psyncctl shutdown, the
// coordinator's --max-steps) is announced ahead, so every rank stops before
// the same iteration. Errors carry their exit code (psync/common/exit_code.h):
// 3 rendezvous, 4 a peer lost or the job aborted, 5 the coordinator lost.
//
// Live recovery (psync-coordinator --recovery=live, the default): when a
// peer is lost, the survivors stay. Give Join the optimizer, and on an
// error ask Rejoin whether to go on:
//
//   PSYNC_ASSIGN_OR_RETURN(auto job, psync::control::Job::Join(opt, model, &sgd));
//   for (int64_t it = job->start_iteration(); it < steps; ++it) {
//     absl::Status st = OneIteration(*job, it);        // BeginIteration, Forward, Backward, sgd.Step
//     if (st.ok()) continue;
//     PSYNC_ASSIGN_OR_RETURN(bool again, job->Rejoin(st, /*steps_completed=*/it));
//     if (!again) return job->Finish(st);
//     it = job->start_iteration() - 1;                  // the job's newest step, every rank alike
//   }
//
// A replacement (psync-launch starts one, or a node comes back) is the same
// program started again: its Join takes the weights and optimizer state
// from a live peer. The data of iteration i must be a function of i (and
// the rank and world size), as it is for a resumed run.
//
// Threads: the training thread owns the Job (the thread that runs backward).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/autograd/variable.h"
#include "psync/comm/process_group.h"
#include "psync/control/session_options.h"
#include "psync/ddp/ddp.h"
#include "psync/nn/module.h"
#include "psync/optim/optimizer.h"
#include "psync/tensor/device.h"

namespace psync::control {

struct JobOptions {
  // Joining: the coordinator, rank, world size, job id, backend, token.
  // Its bucket_caps are ddp.bucket_caps (set them there).
  SessionOptions session;
  // How gradients are averaged. ddp.rebuild is the coordinator's
  // (RebuildMode::kExternal: rank 0's gradient order, announced to all).
  ddp::DdpOptions ddp;
  // Where the module's parameters are ("cpu", "cuda", "cuda:N").
  std::string device = "cpu";
  // With `start.agree`: the checkpoint steps this rank can load; the job
  // starts at the newest one every rank has (start_iteration()).
  StartOffer start;
};

class Job {
 public:
  // `optimizer`: over the module's parameters, made before Join and kept
  // alive as long as the Job; live recovery heals its state with the
  // weights (null: this process cannot take part in a live recovery; a
  // sharded one, --zero, neither: the job then resumes from a checkpoint).
  static absl::StatusOr<std::unique_ptr<Job>> Join(const JobOptions& options, std::shared_ptr<nn::Module> module,
                                                   optim::Optimizer* optimizer = nullptr);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int rank() const;
  int world_size() const;
  Device device() const;
  // The first iteration to run (0, or the agreed checkpoint's step).
  int64_t start_iteration() const;
  // How many iterations the coordinator may run behind (its --plan-lookahead).
  int plan_lookahead() const;
  const std::string& backend() const;  // the process group's: gloo, shm, hier or nccl
  ddp::DistributedDataParallel& ddp() const;
  comm::ProcessGroup& group() const;

  // Before iteration `iteration` (consecutive, from start_iteration()):
  // false when the coordinator stopped the job before it (then call Finish).
  absl::StatusOr<bool> BeginIteration(int64_t iteration);
  // A forward through DDP (`forward` returns the loss, a scalar); then
  // backward. One per iteration, or with gradient accumulation one per
  // micro-batch: the first ones inside a `auto guard = job->ddp().NoSync();`
  // scope, the last after it. The synchronised (last) one sends the
  // iteration's Report, with the parameters every micro-batch used.
  absl::StatusOr<autograd::Variable> Forward(const std::function<autograd::Variable()>& forward);

  // Live recovery: after `failure` (an error of BeginIteration, Forward,
  // backward or the optimizer's step) with `steps_completed` optimizer
  // steps done, whether the coordinator asked this process to stay. If so,
  // the Job has left the ended generation, dropped the interrupted
  // iteration's gradients, joined the next generation with its state,
  // healed whichever rank lacked the newest state (from a live peer, over
  // the data plane) and rebuilt DDP: go on at start_iteration(). false: the
  // job ended (or this Job cannot rejoin: no optimizer at Join, a sharded
  // one, a CUDA device, whose NCCL group cannot send the host tensors a heal
  // moves yet); call Finish(failure). An error: the next generation could not be
  // joined (its exit code says why).
  absl::StatusOr<bool> Rejoin(const absl::Status& failure, int64_t steps_completed);
  // Ends this rank's part: takes the plans of the iterations it reported
  // and sends Done with `outcome` (OK: finished; an error: its exit code,
  // psync/common/exit_code.h). Returns `outcome`, or why the last plans
  // could not be taken. Idempotent; the destructor finishes with an error.
  absl::Status Finish(const absl::Status& outcome);

 private:
  struct State;
  explicit Job(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace psync::control
