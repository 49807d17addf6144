// psync-worker's options: Abseil flags (docs/cli-contract.md) plus the
// torchrun / Kubeflow environment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE, PSYNC_TOKEN, PSYNC_TLS_CA: a
// table of flag / variable fallbacks in worker_flags.cc). A flag given on
// the command line wins over the environment.
//
// WorkerOptions is the whole command line; only psync-worker's flow
// (worker.cc) holds it. Each part it drives takes a small struct built once
// from it (run_options.h): TrainOptions (the trainer), control::SessionOptions
// (the job session), CheckpointOptions (checkpointing.h), ModelSpec (the
// model builder), optim::OptimizerOptions (the optimizer). worker.cc itself
// derives data::DataOptions (DataOptionsFor: --data's section plus what the
// model implies) and ddp::DdpOptions (BuildDdp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "psync/common/bucket_packer.h"
#include "psync/control/session_options.h"
#include "psync/ddp/reducer_options.h"
#include "worker/checkpoint/weights.h"
#include "psync/nn/models/model_flags.h"
#include "worker/data/data_options.h"
#include "worker/runtime/train_options.h"

namespace psync::runtime {

struct WorkerOptions {
  // control plane
  std::string coordinator = "127.0.0.1:29500";  // HOST:PORT
  int rank = -1;                                 // -1 = any
  int world_size = 0;                            // 0 = take it from the coordinator
  int local_rank = 0;
  int local_world_size = 0;                      // ranks on this host; 0 = unknown
  std::string job_id = "psync";
  std::string token;
  std::string tls_ca;                            // PEM CA file; empty = plaintext
  std::string plan_relay;                        // this host's psync-relay (HOST:PORT); empty = none
  std::string gloo_host;                         // empty = derived (control/gloo_host.h)
  std::chrono::milliseconds timeout{30000};
  // Riding through a lost coordinator (--coordinator-grace); its one default is the session's.
  std::chrono::milliseconds coordinator_grace = control::SessionOptions{}.coordinator_grace;
  // model (nn/models/registry.h)
  std::string model = "mlp";
  std::vector<int64_t> widths = {32, 64, 64, 16};  // mlp
  int64_t vocab_size = 0;   // gpt: V; 0 = the data's (256 for bytes)
  int64_t block_size = 64;  // gpt: T, the tokens per sequence (also the token data's)
  // The model's own flags (gpt's --n-layer, cnn's --cnn-channels, a
  // registered model's; psync/nn/models/registry.h), defaults filled in.
  nn::ModelFlags model_flags;
  int skip_layer = -1;      // the MLP layer (--skip-layer) or GPT block (--skip-block) to skip; -1 = none
  SkipPattern skip_pattern = SkipPattern::kAlways;
  std::string init_path;
  checkpoint::WeightsFormat init_format = checkpoint::WeightsFormat::kAuto;  // --init-format
  uint64_t seed = 0;
  // data (worker/data): --data, --data-format, --val-data, --val-fraction,
  // --shuffle, --synthetic-rows; block_size and seed are copied from above.
  data::DataOptions data;
  int64_t eval_every = 0;     // evaluate every N steps (0: only after the last step), when there is held-out data
  int64_t eval_examples = 0;  // evaluate on the first N held-out examples (0 = all)
  int64_t eval_batch = 64;    // examples per evaluation forward
  // optimisation (worker/optim)
  int64_t global_batch = 64;  // examples (rows, images, sequences) per optimizer step over all ranks
  int64_t accumulate = 1;
  int64_t steps = 100;
  double lr = 0.05;           // the peak learning rate (the schedule's)
  std::string optimizer = "sgd";
  double momentum = 0;
  double weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip_grad_norm = 0;  // 0 = off
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  // DDP
  bool find_unused_parameters = false;
  BucketCaps bucket_caps;  // --bucket-cap-mb, --first-bucket-mb (include/psync/common/bucket_packer.h)
  std::string backend = "auto";  // auto | gloo | shm | hier | nccl (comm/backend_choice.h)
  std::string grad_compression = "none";  // none | bf16 | fp16 (ddp/compression_hook.h)
  int zero = 0;  // ZeRO stage: 0 none, 1 sharded optimizer state, 2 also sharded gradients, 3 also parameters (ddp/zero_buckets.h)
  int zero3_prefetch = ddp::ReducerOptions{}.zero3_prefetch;                // --zero3-prefetch
  bool reshard_after_forward = ddp::ReducerOptions{}.reshard_after_forward;  // --reshard-after-forward
  std::string device = "cpu";  // "cpu" | "cuda" | "cuda:N"
  std::string precision = "fp32";  // fp32 | tf32 | bf16 (nn/precision.h)
  // outputs
  std::string save_path;
  // Checkpoints (worker/checkpoint): rank 0 writes every checkpoint_every
  // steps, at the end and on a stop; resume starts from the newest one.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 3;
  bool resume = false;
  std::string trace_path;    // may contain {rank}
  std::string summary_path;  // may contain {rank}
  std::string metrics_path;  // JSON lines per step; may contain {rank}
  int64_t progress_every = 10;
  bool quiet = false;

  // True when layer/block `skip_layer` is skipped in micro-batch `micro` (of
  // `accumulate`) of step `step`.
  bool SkipActive(int64_t step, int64_t micro) const;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup ProcessEnv();

// Parses argv (Abseil flag syntax) and the environment into options and
// validates them. Errors are InvalidArgument with a one-line message naming
// the flag; the caller prints it and exits 2. `help_out` receives the usage
// text when --help was given (then the returned options are meaningless).
absl::StatusOr<WorkerOptions> ParseWorkerOptions(int argc, char** argv, const EnvLookup& env,
                                                 std::string* help_out);

// Checks the batch geometry once the world size is known (the global batch
// divisible by world size x accumulate). world_size must be > 0.
absl::Status ValidateBatchGeometry(const WorkerOptions& opt, int world_size);

// Replaces every "{rank}" in `pattern` with `rank`.
std::string ExpandRank(const std::string& pattern, int rank);

}  // namespace psync::runtime
