// The training loop of psync-worker (the contract is in worker_flags.h and
// docs/cli-contract.md). One iteration = one optimizer step:
//
//   for micro-batch m < M:   (the first M-1 under no_sync)
//     forward (layer J skipped per --skip-pattern), loss = mse / M
//     after the last forward: Report{iter, used bitmap, loss, last step ms,
//                                    [rank 0, iter 1: ready order]}
//     backward (buckets reduce as they fill; with find_unused_parameters
//               finalize takes the global unused set from Plan{iter})
//   optimizer step.
// Before each step it takes the plans it needs then (plan_window.h: through
// Plan{iter-K}, so it runs up to K steps ahead of the coordinator), stops if
// one of them says so, and applies a new bucket plan at its applies_from
// iteration; after the last step it takes the remaining plans before Done.
//
// The trainer knows nothing about gRPC: reports go out through a
// ReportChannel, plans come in through a PlanMailbox.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/ddp/ddp.h"
#include "worker/nn/models/mlp.h"
#include "worker/runtime/dataset.h"
#include "worker/runtime/plan_source.h"
#include "worker/runtime/trace_writer.h"
#include "worker/runtime/worker_flags.h"

namespace psync::runtime {

// Exit codes (docs/cli-contract.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,
  kExitBadInput = 2,
  kExitRendezvous = 3,
  kExitPeerLost = 4,
  kExitCoordinatorLost = 5,
};

class ReportChannel {
 public:
  virtual ~ReportChannel() = default;
  virtual absl::Status SendReport(int64_t iteration, const std::vector<uint8_t>& used, double loss,
                                  double last_step_ms, const std::vector<size_t>& ready_order) = 0;
};

struct TrainContext {
  const WorkerOptions* options = nullptr;
  int rank = 0;
  int world_size = 1;
  Device device;
  const Dataset* data = nullptr;
  std::shared_ptr<nn::MLP> model;
  ddp::DistributedDataParallel* ddp = nullptr;
  ReportChannel* reports = nullptr;
  std::shared_ptr<PlanMailbox> plans;
  int plan_lookahead = 1;  // K, from the coordinator (JoinResult::plan_lookahead)
  TraceWriter* trace = nullptr;
  // Set (from any thread) when the coordinator stream failed: 5; or when an
  // ABORT plan arrived: 4. Read when an iteration fails to classify it.
  const std::atomic<int>* fatal_code = nullptr;
};

struct TrainResult {
  int exit_code = kExitOk;
  std::string reason;              // one line
  int64_t steps_completed = 0;
  double final_loss = 0;           // NaN when no step completed
  std::vector<double> step_ms;
  std::vector<double> losses;      // this rank's loss per completed step
};

TrainResult Train(const TrainContext& ctx);

}  // namespace psync::runtime
