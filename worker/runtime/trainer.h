// The training loop of psync-worker (the contract is in docs/cli-contract.md).
// It trains whatever model, data and optimizer the worker built; it never
// names a specific one. One iteration = one optimizer step:
//
//   the step's M micro-batches come from the prefetch thread (data/prefetcher.h)
//   for micro-batch m < M:   (the first M-1 under no_sync)
//     forward (a layer/block skipped per --skip-pattern), loss = objective / M
//     after the last forward: Report{iter, used bitmap, loss, last step ms,
//                                    [rank 0, iter 1: ready order]}
//     backward (buckets reduce as they fill; with find_unused_parameters
//               finalize takes the global unused set from Plan{iter})
//   clip the averaged gradients (--clip-grad-norm), optimizer step at the
//   schedule's learning rate, metrics line, evaluation every --eval-every.
// Before each step it takes the plans it needs then (plan_window.h: through
// Plan{iter-K}, so it runs up to K steps ahead of the coordinator), stops if
// one of them says so, and applies a new bucket plan at its applies_from
// iteration; after the last step it takes the remaining plans before Done.
//
// The trainer knows nothing about gRPC or the command line: reports go out
// through a control::ReportChannel, plans come in through a
// control::PlanMailbox, its settings are a TrainOptions (train_options.h).
// How a failed iteration ends the run is worker_exit.h's FailedIteration.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "psync/common/exit_code.h"
#include "psync/comm/process_group.h"
#include "worker/control/plan_mailbox.h"
#include "worker/control/report_channel.h"
#include "worker/data/dataset.h"
#include "psync/ddp/ddp.h"
#include "psync/nn/models/model.h"
#include "psync/optim/optimizer.h"
#include "psync/optim/schedule.h"
#include "worker/runtime/metrics_writer.h"
#include "worker/runtime/step_times.h"
#include "worker/runtime/trace_writer.h"
#include "worker/runtime/train_options.h"

namespace psync::runtime {

struct TrainContext {
  TrainOptions options;
  int rank = 0;
  int world_size = 1;
  Device device;
  const data::Dataset* train = nullptr;
  const data::Dataset* val = nullptr;  // null: no evaluation
  nn::Model* model = nullptr;
  ddp::DistributedDataParallel* ddp = nullptr;
  optim::Optimizer* optimizer = nullptr;
  const optim::LrSchedule* schedule = nullptr;
  comm::ProcessGroup* group = nullptr;  // for the evaluation's exchange of sums
  control::ReportChannel* reports = nullptr;
  // Plans as the client's reader delivers them; its failure() (an ABORT, the
  // stream lost) decides how a failed iteration ends.
  std::shared_ptr<control::PlanMailbox> plans;
  int plan_lookahead = 1;  // K, from the coordinator (JoinResult::plan_lookahead)
  TraceWriter* trace = nullptr;
  MetricsWriter* metrics = nullptr;  // null: no --metrics
  // Resume: the first step to run (the steps before it are in the weights and
  // optimizer state already; the data position and the schedule follow the step).
  int64_t first_step = 0;
  // Called on every rank after step s (s = steps completed) when a
  // checkpoint is due: every options.checkpoint_every steps, after the last
  // step, and when a stop ends the run. Null: no checkpoints. The callee
  // decides which rank writes (rank 0).
  std::function<absl::Status(int64_t steps_completed)> save_checkpoint;
};

struct TrainResult {
  int exit_code = kExitOk;
  std::string reason;              // one line
  int64_t steps_completed = 0;
  double final_loss = 0;           // NaN when no step completed
  double val_loss = 0;             // the last evaluation's; NaN when none ran
  double val_accuracy = 0;         // NaN when none ran, or regression
  StepTimes step_ms;               // bounded, O(1) per step (step_times.h)
  double items_per_s = 0;          // tokens (language model) or examples per second, all ranks, median step
  // The most bytes of tensor memory one micro-batch's forward left held for
  // its backward (the activations it saved, and its output) in the last
  // step: what was in use after the forward less what was before. -1: no step.
  int64_t activation_bytes = -1;
  // The coordinator stopped this generation to regroup (an elastic job goes
  // on as the next one): the checkpoint is written, the run's outputs are not.
  bool regroup = false;
  // Training ended (every step ran, or a stop) and the final checkpoint (if
  // any) is written: the weights are the run's last, even when the final
  // evaluation then failed (so --save is written all the same).
  bool trained = false;
};

TrainResult Train(const TrainContext& ctx);

}  // namespace psync::runtime
