#include "worker/runtime/worker_flags.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <cstdlib>
#include <optional>
#include <set>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "psync/nn/precision.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "psync/common/bucket_packer.h"
#include "common/flags.h"
#include "psync/common/status_macros.h"
#include "psync/nn/models/registry.h"
#include "worker/runtime/model_flag_args.h"

// ---- control plane
ABSL_FLAG(std::string, coordinator, "", "coordinator HOST:PORT (default: $MASTER_ADDR:$MASTER_PORT, else 127.0.0.1:29500)");
ABSL_FLAG(int, rank, -1, "this worker's rank, -1 = any (env RANK)");
ABSL_FLAG(int, world_size, 0, "number of workers; 0 = take it from the coordinator (env WORLD_SIZE)");
ABSL_FLAG(int, local_rank, 0, "rank on this host; picks the CUDA device (env LOCAL_RANK)");
ABSL_FLAG(int, local_world_size, 0,
          "ranks on this host (env LOCAL_WORLD_SIZE); with --local-rank it tells which ranks share memory; 0 = unknown");
ABSL_FLAG(std::string, job_id, "psync", "job id; must match the coordinator's");
ABSL_FLAG(std::string, token, "", "shared secret for the coordinator (env PSYNC_TOKEN)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA / certificate to trust: connect to the coordinator over TLS (env PSYNC_TLS_CA; default plaintext)");
ABSL_FLAG(std::string, plan_relay, "",
          "HOST:PORT of this host's psync-relay (psync-launch sets it): the Train stream goes there, carried to "
          "the coordinator on one stream per host; Join and the store still go to --coordinator (default: none)");
ABSL_FLAG(std::string, gloo_host, "",
          "address Gloo binds to (default: 127.0.0.1 when the coordinator is on loopback, else the local "
          "address of the connection to the coordinator)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(30), "collective / plan wait timeout");
ABSL_FLAG(absl::Duration, coordinator_grace, absl::FromChrono(psync::control::SessionOptions{}.coordinator_grace),
          "how long a worker rides through a lost coordinator: it trains on while its plans last and reconnects "
          "for this long, re-registering with the coordinator that comes back, before it exits 5 (0 = exit at "
          "once; behind --plan-relay the new stream goes straight to --coordinator)");
// ---- model
ABSL_FLAG(std::string, model, "mlp", "model: mlp | gpt | cnn, or one the program registered (listed below)");
ABSL_FLAG(std::string, widths, "32,64,64,16", "mlp: layer widths, comma separated (input first)");
ABSL_FLAG(int64_t, vocab_size, 0, "gpt: vocabulary size V (0 = the data's: 256 for --data-format=bytes)");
ABSL_FLAG(int64_t, block_size, 64, "gpt: tokens per sequence T (also the token data's sequence length)");
ABSL_FLAG(int, skip_layer, -1, "mlp: layer to skip (square, not the last); -1 = none");
ABSL_FLAG(int, skip_block, -1, "gpt: transformer block to skip; -1 = none");
ABSL_FLAG(std::string, skip_pattern, "always", "when the skipped layer/block is skipped: always|odd|lastmicro");
ABSL_FLAG(std::string, init, "", "initial weights (safetensors with the model's parameter names and shapes)");
ABSL_FLAG(std::string, init_format, "auto",
          "auto | psync | hf: how --init is laid out (hf: a GPT-2 in Hugging Face's layout; auto tells them apart)");
ABSL_FLAG(uint64_t, seed, 0, "seed of the default initialisation, the synthetic data and --shuffle");
// ---- data
ABSL_FLAG(std::string, data, "",
          "training data: a file (safetensors rows, IDX images, llm.c tokens, or any file with --data-format=bytes), "
          "a directory or glob of llm.c shards (one stream, sorted), fashion-mnist[:DIR]; default: seeded synthetic rows");
ABSL_FLAG(std::string, data_format, "auto", "auto | rows | synthetic | idx | tokens | bytes (worker/data/README.md)");
ABSL_FLAG(std::string, val_data, "", "held-out data, same forms as --data");
ABSL_FLAG(double, val_fraction, 0, "hold out the tail of --data for evaluation (0 = none)");
ABSL_FLAG(bool, shuffle, false, "rows/images: a seeded permutation per epoch (the same on every rank)");
ABSL_FLAG(int64_t, synthetic_rows, 1024, "rows of the synthetic data set");
ABSL_FLAG(int64_t, eval_every, 0, "evaluate on the held-out data every N steps (0: after the last step only)");
ABSL_FLAG(int64_t, eval_examples, 0, "evaluate on the first N held-out examples (0 = all)");
ABSL_FLAG(int64_t, eval_batch, 64, "held-out examples per evaluation forward");
// ---- optimisation
ABSL_FLAG(int64_t, global_batch, 64, "examples (rows, images, sequences) per optimizer step over all workers");
ABSL_FLAG(int64_t, accumulate, 1, "micro-batches per optimizer step (gradient accumulation)");
ABSL_FLAG(int64_t, steps, 100, "optimizer steps");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd | adamw (worker/optim/README.md)");
ABSL_FLAG(double, lr, 0.05, "learning rate (the peak of --lr-schedule)");
ABSL_FLAG(double, momentum, 0, "sgd: momentum");
ABSL_FLAG(double, weight_decay, 0, "sgd: L2 added to the gradient; adamw: decoupled decay of parameters with 2+ dims");
ABSL_FLAG(double, beta1, 0.9, "adamw: first moment decay");
ABSL_FLAG(double, beta2, 0.95, "adamw: second moment decay");
ABSL_FLAG(double, eps, 1e-8, "adamw: added after the square root");
ABSL_FLAG(double, clip_grad_norm, 0, "scale gradients so their global L2 norm is at most X (0 = off)");
ABSL_FLAG(std::string, lr_schedule, "constant", "constant | cosine (linear warmup, then cosine down to 0.1*lr at --steps)");
ABSL_FLAG(int64_t, warmup_steps, 0, "linear warmup steps of --lr-schedule");
// ---- DDP
ABSL_FLAG(bool, find_unused_parameters, false, "detect parameters unused by the forward pass");
// The defaults are the one default of the caps (include/psync/common/bucket_packer.h), in MiB.
ABSL_FLAG(double, bucket_cap_mb, static_cast<double>(psync::kDefaultBucketCapBytes) / (1 << 20),
          "bucket size cap in MiB");
ABSL_FLAG(double, first_bucket_mb, static_cast<double>(psync::kDefaultFirstBucketCapBytes) / (1 << 20),
          "first bucket size cap in MiB");
ABSL_FLAG(std::string, device, "cpu", "cpu | cuda (cuda = cuda:LOCAL_RANK) | cuda:N");
ABSL_FLAG(std::string, precision, "fp32",
          "fp32 | tf32 (CUDA float32 products on TF32 tensor cores) | bf16 (autocast's rules: bfloat16 matmuls and "
          "activations, float32 master weights, gradients, optimizer state and checkpoints; gpt and mlp)");
ABSL_FLAG(std::string, grad_compression, "none",
          "none | bf16 | fp16: allreduce gradients cast to 16 bits (half the bytes; changes the numbers, see "
          "worker/ddp/README.md)");
ABSL_FLAG(int, zero, 0,
          "ZeRO: 0 = every rank holds all optimizer state; 1 = each rank keeps the optimizer state of 1/W of the "
          "parameters (reduce-scatter, update, all-gather); 2 = also only 1/W of the gradients between steps; "
          "3 = also only 1/W of the parameters, a module's gathered just before its forward and its backward");
ABSL_FLAG(int, zero3_prefetch, psync::ddp::ReducerOptions{}.zero3_prefetch,
          "--zero=3: buckets of parameters gathered ahead of the one a module needs (0 = none)");
ABSL_FLAG(bool, reshard_after_forward, psync::ddp::ReducerOptions{}.reshard_after_forward,
          "--zero=3: release a module's parameters after its forward and gather them again for its backward "
          "(false: keep them from forward to backward, more memory, half the gathers)");
ABSL_FLAG(std::string, backend, "auto",
          "gradient transport: auto | gloo | shm (one host, shared memory) | hier (shm within hosts, Gloo across) | "
          "nccl (CUDA); auto picks the fastest one that works and the worker prints its choice");
// ---- outputs
ABSL_FLAG(std::string, save, "", "rank 0 writes the final weights here (safetensors)");
ABSL_FLAG(std::string, trace, "", "Chrome trace JSON output ({rank} is replaced by the rank)");
ABSL_FLAG(std::string, summary, "", "JSON summary output ({rank} is replaced by the rank)");
ABSL_FLAG(std::string, metrics, "", "per-step metrics as JSON lines ({rank} is replaced by the rank); see scripts/plot-run.sh");
ABSL_FLAG(int64_t, progress_every, 10, "rank 0 prints a progress line every N steps (0 = never)");
ABSL_FLAG(bool, quiet, false, "no progress lines");
// ---- checkpoints
ABSL_FLAG(std::string, checkpoint_dir, "", "rank 0 writes checkpoints here (ckpt-STEP.safetensors); --resume reads them");
ABSL_FLAG(int64_t, checkpoint_every, 0, "write a checkpoint every N steps (0 = only at the end or on a stop)");
ABSL_FLAG(int64_t, keep_checkpoints, 3, "keep the newest K checkpoints (0 = all)");
ABSL_FLAG(bool, resume, false, "start from the newest complete checkpoint in --checkpoint-dir (none there: from scratch)");

namespace psync::runtime {

namespace {

const std::set<std::string>& WorkerFlagNames() {
  static const std::set<std::string> names = {
      "coordinator", "rank", "world_size", "local_rank", "local_world_size", "job_id", "token", "tls_ca", "plan_relay", "gloo_host", "timeout", "coordinator_grace",
      "model", "widths", "vocab_size", "block_size", "skip_layer", "skip_block",
      "skip_pattern", "init", "init_format", "seed",
      "data", "data_format", "val_data", "val_fraction", "shuffle", "synthetic_rows", "eval_every", "eval_examples",
      "eval_batch",
      "global_batch", "accumulate", "steps", "optimizer", "lr", "momentum", "weight_decay", "beta1", "beta2", "eps",
      "clip_grad_norm", "lr_schedule", "warmup_steps",
      "find_unused_parameters", "bucket_cap_mb", "first_bucket_mb", "device", "precision", "backend", "grad_compression", "zero",
      "zero3_prefetch", "reshard_after_forward",
      "save", "trace", "summary", "metrics", "progress_every", "quiet",
      "checkpoint_dir", "checkpoint_every", "keep_checkpoints", "resume"};
  return names;
}

// The environment variables that stand in for a flag the command line does
// not give (torchrun and Kubeflow set the first four). --coordinator is
// made of two (MASTER_ADDR, MASTER_PORT): CoordinatorFrom.
struct EnvFallback {
  const char* flag;  // underscore form
  const char* env;
};
constexpr EnvFallback kEnvFallbacks[] = {
    {"rank", "RANK"}, {"world_size", "WORLD_SIZE"}, {"local_rank", "LOCAL_RANK"},
    {"local_world_size", "LOCAL_WORLD_SIZE"}, {"token", "PSYNC_TOKEN"}, {"tls_ca", "PSYNC_TLS_CA"},
};

absl::Status Bad(const std::string& flag, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", msg));
}

bool IsHostPort(const std::string& s) {
  const size_t colon = s.rfind(':');
  int port = 0;
  return colon != std::string::npos && colon != 0 && absl::SimpleAtoi(s.substr(colon + 1), &port) && port > 0 &&
         port <= 65535;
}

// Where each value comes from: the command line, else the flag's
// environment variable (kEnvFallbacks), else the flag's default.
class FlagSource {
 public:
  FlagSource(const ParsedArgs& parsed, const EnvLookup& env) : parsed_(parsed), env_(env) {}

  bool given(const char* flag) const { return parsed_.specified.count(flag) > 0; }
  const EnvLookup& env() const { return env_; }

  absl::StatusOr<int> Int(const absl::Flag<int>& flag, const char* name) const {
    std::optional<std::pair<std::string, std::string>> e = FromEnv(name);
    if (!e) return absl::GetFlag(flag);
    int out = 0;
    if (!absl::SimpleAtoi(e->second, &out)) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable ", e->first, "='", e->second, "' is not an integer"));
    }
    return out;
  }
  std::string String(const absl::Flag<std::string>& flag, const char* name) const {
    std::optional<std::pair<std::string, std::string>> e = FromEnv(name);
    return e ? e->second : absl::GetFlag(flag);
  }

 private:
  // {variable, value} when the command line lacks flag `name` and its variable is set.
  std::optional<std::pair<std::string, std::string>> FromEnv(const char* name) const {
    if (given(name)) return std::nullopt;
    for (const EnvFallback& f : kEnvFallbacks) {
      if (std::string(f.flag) != name) continue;
      std::optional<std::string> v = env_(f.env);
      if (v) return std::make_pair(std::string(f.env), *v);
    }
    return std::nullopt;
  }

  const ParsedArgs& parsed_;
  const EnvLookup& env_;
};

// --coordinator, else MASTER_ADDR:MASTER_PORT (either may default: 127.0.0.1, 29500).
absl::Status CoordinatorFrom(const FlagSource& src, WorkerOptions& o) {
  if (src.given("coordinator")) {
    o.coordinator = absl::GetFlag(FLAGS_coordinator);
  } else if (src.env()("MASTER_ADDR")) {
    std::string port = src.env()("MASTER_PORT").value_or("29500");
    o.coordinator = absl::StrCat(*src.env()("MASTER_ADDR"), ":", port);
  } else if (src.env()("MASTER_PORT")) {
    o.coordinator = absl::StrCat("127.0.0.1:", *src.env()("MASTER_PORT"));
  }
  if (!IsHostPort(o.coordinator)) return Bad("coordinator", absl::StrCat("'", o.coordinator, "' is not HOST:PORT"));
  return absl::OkStatus();
}

absl::Status ParseControlPlane(const FlagSource& src, WorkerOptions& o) {
  PSYNC_RETURN_IF_ERROR(CoordinatorFrom(src, o));
  PSYNC_ASSIGN_OR_RETURN(o.rank, src.Int(FLAGS_rank, "rank"));
  if (o.rank < -1) return Bad("rank", absl::StrCat(o.rank, " is negative (use -1 for any)"));
  PSYNC_ASSIGN_OR_RETURN(o.world_size, src.Int(FLAGS_world_size, "world_size"));
  if (o.world_size < 0) return Bad("world-size", absl::StrCat(o.world_size, " is negative"));
  if (o.world_size > 0 && o.rank >= o.world_size) {
    return Bad("rank", absl::StrCat(o.rank, " is not below --world-size ", o.world_size));
  }
  PSYNC_ASSIGN_OR_RETURN(o.local_rank, src.Int(FLAGS_local_rank, "local_rank"));
  if (o.local_rank < 0) return Bad("local-rank", absl::StrCat(o.local_rank, " is negative"));
  PSYNC_ASSIGN_OR_RETURN(o.local_world_size, src.Int(FLAGS_local_world_size, "local_world_size"));
  if (o.local_world_size < 0) return Bad("local-world-size", absl::StrCat(o.local_world_size, " is negative"));
  if (o.local_world_size > 0 && o.local_rank >= o.local_world_size) {
    return Bad("local-rank", absl::StrCat(o.local_rank, " is not below the local world size ", o.local_world_size));
  }
  o.job_id = absl::GetFlag(FLAGS_job_id);
  if (o.job_id.empty()) return Bad("job-id", "must not be empty");
  o.token = src.String(FLAGS_token, "token");
  o.tls_ca = src.String(FLAGS_tls_ca, "tls_ca");
  if (!o.tls_ca.empty() && std::ifstream(o.tls_ca).fail()) {
    return Bad("tls-ca", absl::StrCat("cannot read '", o.tls_ca, "': ", std::strerror(errno)));
  }
  o.plan_relay = absl::GetFlag(FLAGS_plan_relay);
  if (!o.plan_relay.empty() && !IsHostPort(o.plan_relay)) {
    return Bad("plan-relay", absl::StrCat("'", o.plan_relay, "' is not HOST:PORT"));
  }
  o.gloo_host = absl::GetFlag(FLAGS_gloo_host);
  absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout <= absl::ZeroDuration()) return Bad("timeout", "must be positive (e.g. 30s)");
  o.timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout));
  const absl::Duration grace = absl::GetFlag(FLAGS_coordinator_grace);
  if (grace < absl::ZeroDuration()) return Bad("coordinator-grace", "must be >= 0 (e.g. 60s; 0 = exit at once)");
  o.coordinator_grace = std::chrono::milliseconds(absl::ToInt64Milliseconds(grace));
  return absl::OkStatus();
}

// `text` as comma-separated positive integers; `what` says what it should be.
absl::StatusOr<std::vector<int64_t>> PositiveList(const char* flag, const std::string& text, const char* what) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) return Bad(flag, absl::StrCat("'", text, "' is not ", what));
    out.push_back(v);
  }
  return out;
}

// The model's flags (validated against the data and built in model_builder.cc).
absl::Status ParseModel(const FlagSource& src, WorkerOptions& o) {
  o.model = absl::GetFlag(FLAGS_model);
  if (!nn::Models().Contains(o.model)) {
    return Bad("model", absl::StrCat("'", o.model, "' is not one of ", absl::StrJoin(nn::Models().Names(), "|")));
  }
  PSYNC_ASSIGN_OR_RETURN(o.widths, PositiveList("widths", absl::GetFlag(FLAGS_widths),
                                                "a comma-separated list of positive integers"));
  if (o.widths.size() < 2) return Bad("widths", "needs at least two widths (input and output)");
  o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  if (o.vocab_size < 0) return Bad("vocab-size", "must not be negative (0 = the data's)");
  o.block_size = absl::GetFlag(FLAGS_block_size);
  if (o.block_size <= 0) return Bad("block-size", "must be positive");
  if (src.given("skip_layer") && src.given("skip_block")) {
    return Bad("skip-block", "give --skip-layer (mlp) or --skip-block (gpt), not both");
  }
  const bool block = src.given("skip_block");
  o.skip_layer = block ? absl::GetFlag(FLAGS_skip_block) : absl::GetFlag(FLAGS_skip_layer);
  if (o.skip_layer < -1) return Bad(block ? "skip-block" : "skip-layer", "must be -1 (none) or an index");
  const std::string pattern = absl::GetFlag(FLAGS_skip_pattern);
  if (pattern == "always") o.skip_pattern = SkipPattern::kAlways;
  else if (pattern == "odd") o.skip_pattern = SkipPattern::kOdd;
  else if (pattern == "lastmicro") o.skip_pattern = SkipPattern::kLastMicro;
  else return Bad("skip-pattern", absl::StrCat("'", pattern, "' is not one of always|odd|lastmicro"));
  o.init_path = absl::GetFlag(FLAGS_init);
  absl::StatusOr<checkpoint::WeightsFormat> init_format = checkpoint::ParseWeightsFormat(absl::GetFlag(FLAGS_init_format));
  if (!init_format.ok()) return Bad("init-format", std::string(init_format.status().message()));
  o.init_format = *init_format;
  o.seed = absl::GetFlag(FLAGS_seed);
  return absl::OkStatus();
}

// The data's flags (the files are opened and validated by data::Open before joining).
absl::Status ParseData(WorkerOptions& o) {
  o.data.path = absl::GetFlag(FLAGS_data);
  o.data.format = absl::GetFlag(FLAGS_data_format);
  o.data.val_path = absl::GetFlag(FLAGS_val_data);
  o.data.val_fraction = absl::GetFlag(FLAGS_val_fraction);
  o.data.shuffle = absl::GetFlag(FLAGS_shuffle);
  o.data.seed = o.seed;
  o.data.block_size = o.block_size;
  o.data.synthetic_rows = absl::GetFlag(FLAGS_synthetic_rows);
  if (o.data.synthetic_rows <= 0) return Bad("synthetic-rows", "must be positive");
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  if (o.eval_every < 0) return Bad("eval-every", "must not be negative");
  o.eval_examples = absl::GetFlag(FLAGS_eval_examples);
  if (o.eval_examples < 0) return Bad("eval-examples", "must not be negative");
  o.eval_batch = absl::GetFlag(FLAGS_eval_batch);
  if (o.eval_batch <= 0) return Bad("eval-batch", "must be positive");
  return absl::OkStatus();
}

absl::Status ParseOptimisation(WorkerOptions& o) {
  o.global_batch = absl::GetFlag(FLAGS_global_batch);
  if (o.global_batch <= 0) return Bad("global-batch", absl::StrCat(o.global_batch, " must be positive"));
  o.accumulate = absl::GetFlag(FLAGS_accumulate);
  if (o.accumulate <= 0) return Bad("accumulate", absl::StrCat(o.accumulate, " must be positive"));
  o.steps = absl::GetFlag(FLAGS_steps);
  if (o.steps < 0) return Bad("steps", absl::StrCat(o.steps, " must not be negative"));
  o.lr = absl::GetFlag(FLAGS_lr);
  if (!std::isfinite(o.lr) || o.lr < 0) return Bad("lr", "must be a finite number >= 0");
  // The optimizer's own options are validated by its factory (optim/registry.h).
  o.optimizer = absl::GetFlag(FLAGS_optimizer);
  o.momentum = absl::GetFlag(FLAGS_momentum);
  // torch accepts momentum 1, but the velocity then never decays: a typo, not a choice.
  if (!(o.momentum >= 0 && o.momentum < 1)) return Bad("momentum", "must be in [0, 1)");
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) return Bad("weight-decay", "must be a finite value >= 0");
  o.beta1 = absl::GetFlag(FLAGS_beta1);
  o.beta2 = absl::GetFlag(FLAGS_beta2);
  o.eps = absl::GetFlag(FLAGS_eps);
  o.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  if (!std::isfinite(o.clip_grad_norm) || o.clip_grad_norm < 0) return Bad("clip-grad-norm", "must be >= 0 (0 = off)");
  o.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  if (o.world_size > 0) PSYNC_RETURN_IF_ERROR(ValidateBatchGeometry(o, o.world_size));
  return absl::OkStatus();
}

absl::Status ParseDdp(WorkerOptions& o) {
  o.find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters);
  PSYNC_ASSIGN_OR_RETURN(o.bucket_caps,
                         BucketCaps::FromMiB(absl::GetFlag(FLAGS_bucket_cap_mb), absl::GetFlag(FLAGS_first_bucket_mb)));
  o.device = absl::GetFlag(FLAGS_device);
  if (o.device != "cpu" && o.device != "cuda" && o.device.rfind("cuda:", 0) != 0) {
    return Bad("device", absl::StrCat("'", o.device, "' is not cpu or cuda"));
  }
  o.precision = absl::GetFlag(FLAGS_precision);
  if (absl::StatusOr<nn::Precision> p = nn::ParsePrecision(o.precision); !p.ok()) {
    return Bad("precision", absl::StrCat("'", o.precision, "' is not one of fp32|tf32|bf16"));
  }
  o.backend = absl::GetFlag(FLAGS_backend);
  if (o.backend != "auto" && o.backend != "gloo" && o.backend != "shm" && o.backend != "hier" &&
      o.backend != "nccl") {
    return Bad("backend", absl::StrCat("'", o.backend, "' is not one of auto|gloo|shm|hier|nccl"));
  }
  o.grad_compression = absl::GetFlag(FLAGS_grad_compression);
  if (o.grad_compression != "none" && o.grad_compression != "bf16" && o.grad_compression != "fp16") {
    return Bad("grad-compression", absl::StrCat("'", o.grad_compression, "' is not one of none|bf16|fp16"));
  }
  o.zero = absl::GetFlag(FLAGS_zero);
  if (o.zero < 0 || o.zero > 3) return Bad("zero", absl::StrCat(o.zero, " is not one of 0|1|2|3"));
  o.zero3_prefetch = absl::GetFlag(FLAGS_zero3_prefetch);
  if (o.zero3_prefetch < 0) return Bad("zero3-prefetch", absl::StrCat(o.zero3_prefetch, " must be >= 0"));
  o.reshard_after_forward = absl::GetFlag(FLAGS_reshard_after_forward);
  if (o.zero > 0 && o.grad_compression != "none") {
    return Bad("zero", absl::StrCat("--zero=", o.zero, " reduce-scatters plain float32 gradients; it cannot be "
                                    "combined with --grad-compression=", o.grad_compression));
  }
  const bool cuda = o.device != "cpu";
  if (cuda && o.backend != "auto" && o.backend != "nccl" && o.backend != "shm") {
    return Bad("backend", absl::StrCat(o.backend, " reduces CPU tensors; with --device=", o.device,
                                       " use nccl (or auto), or shm on one host"));
  }
  if (!cuda && o.backend == "nccl") return Bad("backend", "nccl needs --device=cuda; on CPU use auto, gloo, shm or hier");
  return absl::OkStatus();
}

absl::Status ParseOutputs(WorkerOptions& o) {
  o.save_path = absl::GetFlag(FLAGS_save);
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  if (o.checkpoint_every < 0) return Bad("checkpoint-every", "must not be negative (0 = only at the end or on a stop)");
  o.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  if (o.keep_checkpoints < 0) return Bad("keep-checkpoints", "must not be negative (0 = keep all)");
  o.resume = absl::GetFlag(FLAGS_resume);
  if ((o.resume || o.checkpoint_every > 0) && o.checkpoint_dir.empty()) {
    return Bad(o.resume ? "resume" : "checkpoint-every", "needs --checkpoint-dir");
  }
  o.trace_path = absl::GetFlag(FLAGS_trace);
  o.summary_path = absl::GetFlag(FLAGS_summary);
  o.metrics_path = absl::GetFlag(FLAGS_metrics);
  o.progress_every = absl::GetFlag(FLAGS_progress_every);
  if (o.progress_every < 0) return Bad("progress-every", "must not be negative");
  o.quiet = absl::GetFlag(FLAGS_quiet);
  return absl::OkStatus();
}

}  // namespace

bool WorkerOptions::SkipActive(int64_t step, int64_t micro) const {
  return SkipSchedule{skip_layer, skip_pattern}.Active(step, micro, accumulate);
}

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

std::string ExpandRank(const std::string& pattern, int rank) {
  std::string out = pattern;
  const std::string key = "{rank}";
  size_t pos = 0;
  while ((pos = out.find(key, pos)) != std::string::npos) {
    std::string r = std::to_string(rank);
    out.replace(pos, key.size(), r);
    pos += r.size();
  }
  return out;
}

absl::StatusOr<WorkerOptions> ParseWorkerOptions(int argc, char** argv, const EnvLookup& env,
                                                 std::string* help_out) {
  // A registered model's own flags first (model_flag_args.h): Abseil does not know them.
  PSYNC_ASSIGN_OR_RETURN(ModelFlagArgs model_args, SplitModelFlags(argc, argv, WorkerFlagNames()));
  std::vector<char*> rest;
  for (std::string& a : model_args.rest) rest.push_back(a.data());
  absl::StatusOr<ParsedArgs> parsed =
      ParseFlagsStrict(static_cast<int>(rest.size()), rest.data(), WorkerFlagNames());
  if (!parsed.ok()) return parsed.status();
  if (parsed->help) {
    if (help_out) {
      *help_out = absl::StrCat("usage: psync-worker [flags]\n", FlagsHelp(WorkerFlagNames()), ModelsHelp(),
                               "environment: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PSYNC_TOKEN PSYNC_TLS_CA "
                               "PSYNC_HOST_ID\n");
    }
    return WorkerOptions{};
  }
  if (!parsed->positional.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", parsed->positional.front(), "' (flags look like --name=value)"));
  }
  const FlagSource src(*parsed, env);
  WorkerOptions o;
  PSYNC_RETURN_IF_ERROR(ParseControlPlane(src, o));
  PSYNC_RETURN_IF_ERROR(ParseModel(src, o));
  PSYNC_ASSIGN_OR_RETURN(o.model_flags, ResolveModelFlags(o.model, model_args.given));
  PSYNC_RETURN_IF_ERROR(ParseData(o));
  PSYNC_RETURN_IF_ERROR(ParseOptimisation(o));
  PSYNC_RETURN_IF_ERROR(ParseDdp(o));
  PSYNC_RETURN_IF_ERROR(ParseOutputs(o));
  return o;
}

absl::Status ValidateBatchGeometry(const WorkerOptions& opt, int world_size) {
  const int64_t per = static_cast<int64_t>(world_size) * opt.accumulate;
  if (world_size <= 0 || opt.global_batch % per != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", opt.global_batch, " must be divisible by --world-size x --accumulate = ", world_size,
        " x ", opt.accumulate, " = ", per));
  }
  return absl::OkStatus();
}

}  // namespace psync::runtime
