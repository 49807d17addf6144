#include "worker/runtime/worker.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "psync/common/logging.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "worker/comm/shm/segment_name.h"
#include "worker/control/job_session.h"
#include "worker/data/batch_geometry.h"
#include "worker/data/registry.h"
#include "worker/ddp/compression_hook.h"
#include "psync/ddp/ddp.h"
#include "psync/ddp/training_optimizer.h"
#include "psync/optim/schedule.h"
#include "worker/runtime/checkpointing.h"
#include "worker/runtime/test_kill.h"
#include "worker/runtime/job_fingerprint.h"
#include "worker/runtime/metrics_writer.h"
#include "worker/runtime/model_builder.h"
#include "worker/runtime/run_options.h"
#include "worker/runtime/summary.h"
#include "worker/runtime/trace_writer.h"
#include "worker/runtime/trainer.h"
#include "worker/runtime/worker_exit.h"
#include "worker/tensor/cuda/cuda_device.h"  // SetCurrentDevice
#include "worker/ddp/reducer.h"
#include "worker/optim/sharded_optimizer.h"

namespace psync::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// --device: the worker's device, made current for this thread.
absl::StatusOr<Device> SetUpDevice(const WorkerOptions& opt) {
  const std::string text = opt.device == "cuda" ? absl::StrCat("cuda:", opt.local_rank) : opt.device;
  absl::StatusOr<Device> device = ParseDevice(text);
  if (!device.ok()) return absl::InvalidArgumentError(absl::StrCat("--device: ", device.status().message()));
  if (absl::Status st = CheckDeviceAvailable(*device); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--device ", text, ": ", st.message()));
  }
  if (device->is_cuda()) {
    // Make cuda:LOCAL_RANK this thread's current device before any tensor
    // work: the ops' device guards would otherwise switch back to cuda:0
    // after each op and put a CUDA context on GPU 0 in every rank's process.
    absl::Status st = RunCatching(absl::StrCat("--device ", text),
                                  [&] { cuda_device::SetCurrentDevice(device->index); },
                                  absl::StatusCode::kInvalidArgument);
    if (!st.ok()) return st;
  }
  return device;
}

// The device memory pool's high-water mark (-1: unknown).
int64_t PeakDeviceBytes(Device device) {
  int64_t peak = -1;
  (void)RunCatching("", [&] { peak = static_cast<int64_t>(cuda_device::PeakBytes(device.index)); });
  return peak;
}

data::DataOptions DataOptionsFor(const WorkerOptions& opt) {
  data::DataOptions d = opt.data;
  if (opt.model == "gpt") d.vocab_size = opt.vocab_size;  // shards check their ids against it
  if (opt.model != "gpt" && opt.model != "cnn") {  // rows: x and y widths are --widths' ends (the MLP's)
    d.rows_in = opt.widths.front();
    d.rows_out = opt.widths.back();
  }
  return d;
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> BuildOptimizer(const WorkerOptions& opt, const nn::Module& model,
                                                                 const nn::PrecisionPolicy& precision) {
  // --zero: the same update on this rank's shards, attached once DDP exists.
  return ddp::MakeOptimizer(opt.optimizer, OptimizerOptionsFrom(opt), model.named_parameters(), precision, opt.zero);
}

// One run of psync-worker, in phases; each error ends the run with the exit
// code it carries or its phase's (worker_exit.h). The members are built in
// declaration order and destroyed in reverse, so DDP and the trainer's
// outputs go before the job session, which goes before the model and data.
// Owned by the main thread.
class WorkerRun {
 public:
  explicit WorkerRun(const WorkerOptions& opt) : opt_(opt), started_(Clock::now()) {}
  WorkerExit Run();

 private:
  // Device, data, model, optimizer, --resume's scan of the checkpoint
  // directory, schedule: bad input fails here (exit 2), before joining.
  absl::Status Prepare();
  // After Join: the agreed checkpoint (exit 1 if it cannot be loaded), the
  // batch geometry and --metrics (exit 2), DDP (exit 3, or the job's
  // failure once the plans stopped).
  absl::Status SetUpTraining();
  // Joins the job (a new JobSession) with `offer`: rank, world. `rejoin`:
  // live recovery's Join of a process that stays (JobSession::Rejoin).
  absl::Status JoinJob(const control::StartOffer& offer, bool rejoin = false);
  // Live recovery: after `failure` (exit code `code`) in set-up or
  // training, whether the coordinator asked this process to stay and rejoin
  // (the ABORT plan's rejoin_generation; 0 = exit as usual, also where
  // JobSession::RejoinGeneration says the state cannot be healed in
  // process: the survivors then exit and the job resumes from a checkpoint).
  int64_t RejoinGeneration(int code) const;
  // Leaves the ended generation (DDP, then the session and its group) and
  // joins `generation` with the state it holds (held_step_; none: as a
  // fresh process); then SetUpTraining (healing whoever lacks the start).
  absl::Status RejoinLive(int64_t generation);
  absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> BuildDdp();
  // Live recovery before DDP: heal_source's state to whoever lacks it, or
  // with --zero (`sharded`) the whole state rebuilt on every rank.
  absl::Status Heal(int heal_source, optim::ShardedOptimizer* sharded);
  void PrintBanner() const;
  TrainResult Train();
  // --save (rank 0), --trace, rank 0's summary line.
  void Outputs(TrainResult& tr);
  // Done to the coordinator, --summary; the run's exit.
  WorkerExit Finish(int code, const std::string& reason, const TrainResult* tr);

  const WorkerOptions& opt_;
  const Clock::time_point started_;
  int rank_ = -1, world_ = 0;
  int64_t accumulate_ = 1;  // --accumulate, adapted to the world (SetUpTraining)
  Device device_;
  std::optional<data::OpenedData> data_;
  std::shared_ptr<nn::Model> model_;
  nn::ModelOptions model_options_;
  std::shared_ptr<const nn::PrecisionPolicy> precision_;  // --precision, in use by the model
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::optional<optim::LrSchedule> schedule_;
  ResumeScan resume_;  // --resume: the checkpoints this rank can load, until the agreed one is loaded
  int64_t first_step_ = 0;
  bool live_ = false;  // this process joined the current generation with its state in memory
  bool state_lost_ = false;  // --zero: a lost shard no survivor holds a copy of (exit, do not rejoin)
  // The completed steps of the training state this process holds, once it
  // is whole (loaded, healed or trained); nullopt before (a fresh process
  // whose set-up failed rejoins as one).
  std::optional<int64_t> held_step_;
  std::unique_ptr<control::JobSession> session_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<ddp::DistributedDataParallel> ddp_;
  std::unique_ptr<TraceWriter> trace_;
};

absl::Status WorkerRun::Prepare() {
  PSYNC_ASSIGN_OR_RETURN(device_, SetUpDevice(opt_));
  absl::StatusOr<data::OpenedData> data = data::Open(DataOptionsFor(opt_));
  if (!data.ok()) return data.status();
  data_ = std::move(*data);
  PSYNC_ASSIGN_OR_RETURN(BuiltModel built, BuildModel(ModelSpecFrom(opt_), data_->train->info(), device_));
  model_ = std::move(built.model);
  model_options_ = built.options;
  precision_ = built.precision;
  PSYNC_ASSIGN_OR_RETURN(optimizer_, BuildOptimizer(opt_, *model_, *precision_));
  // Why only list here: which checkpoint to load is decided at rendezvous,
  // once for the whole generation (the coordinator's resume agreement).
  PSYNC_ASSIGN_OR_RETURN(resume_, ScanCheckpoints(CheckpointOptionsFrom(opt_), model_->named_parameters()));
  absl::StatusOr<optim::LrSchedule> schedule =
      optim::LrSchedule::Create(opt_.lr_schedule, opt_.lr, opt_.warmup_steps, std::max<int64_t>(1, opt_.steps));
  if (!schedule.ok()) return schedule.status();
  schedule_.emplace(std::move(*schedule));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> WorkerRun::BuildDdp() {
  ddp::DdpOptions dopt;
  dopt.bucket_caps = opt_.bucket_caps;
  dopt.find_unused_parameters = opt_.find_unused_parameters;
  dopt.timeout = opt_.timeout;
  dopt.comm_hook = *ddp::CommHookFromFlag(opt_.grad_compression);  // validated with the flags
  if (opt_.zero == 0) dopt.comm_hook = test_kill::Wrap(dopt.comm_hook);  // PSYNC_TEST_KILL's allreduce phase
  dopt.zero_stage = opt_.zero;
  dopt.zero3_prefetch = opt_.zero3_prefetch;
  dopt.reshard_after_forward = opt_.reshard_after_forward;
  return session_->MakeDdp(model_, dopt);
}

absl::Status WorkerRun::SetUpTraining() {
  // The step every rank agreed on at Join; the model and optimizer state
  // come from exactly that checkpoint (0: the initial weights).
  first_step_ = session_->start_iteration();
  // Live recovery: the start is the survivors' newest step, not a file; a
  // rank that lacks it takes it from heal_source before DDP's broadcast.
  const int heal_source = session_->heal_source();
  if (opt_.resume && !live_ && heal_source < 0) {
    PSYNC_RETURN_IF_ERROR(
        LoadAgreedCheckpoint(CheckpointOptionsFrom(opt_), rank_, first_step_, resume_, *model_, *optimizer_));
  }
  // --zero: no rank holds the whole state, so every member of a live
  // generation rebuilds it from the survivors' shards, even when no rank
  // needs healing (the layout changes with the world).
  auto* sharded = dynamic_cast<optim::ShardedOptimizer*>(optimizer_.get());
  if (sharded != nullptr ? live_ || heal_source >= 0 : heal_source >= 0) {
    PSYNC_RETURN_IF_ERROR(Heal(heal_source, sharded));
  }
  held_step_ = first_step_;  // whole now: loaded, healed or this rank's own
  // Elastic: a world smaller than the one the flags planned splits the same
  // global batch over fewer ranks, in more micro-batches where a share would
  // exceed the planned micro-batch (the data order does not change).
  absl::StatusOr<int64_t> m = data::AccumulateForWorld(opt_.global_batch, opt_.accumulate, opt_.world_size, world_);
  if (!m.ok()) return WithExitCode(m.status(), kExitBadInput);
  accumulate_ = *m;
  if (accumulate_ != opt_.accumulate || (opt_.world_size > 0 && world_ != opt_.world_size)) {
    PSYNC_LOG(INFO) << "world of " << world_ << " ranks (planned " << opt_.world_size << "): global batch "
                    << opt_.global_batch << " in " << accumulate_ << " micro-batch(es) of "
                    << opt_.global_batch / (world_ * accumulate_) << " per rank (--accumulate=" << opt_.accumulate
                    << ")";
  }
  if (!opt_.metrics_path.empty() && !metrics_) {  // a live rejoin keeps appending to it
    absl::StatusOr<std::unique_ptr<MetricsWriter>> m = MetricsWriter::Open(ExpandRank(opt_.metrics_path, rank_));
    if (!m.ok()) return WithExitCode(m.status(), kExitBadInput);
    metrics_ = std::move(*m);
  }
  absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> ddp = BuildDdp();
  if (!ddp.ok()) return ddp.status();
  ddp_ = std::move(*ddp);
  // The bf16 copies, once, from the weights every rank now holds: rank 0's
  // (DDP's broadcast), which are the agreed checkpoint's with --resume.
  // (--zero=3: each bucket's, once gathered, by the hook AttachOptimizer sets.)
  if (opt_.zero < 3) precision_->RefreshCopies();
  // --zero: the optimizer updates the shards DDP's buckets hand it (and,
  // with live recovery, keeps each step's shard on another rank too).
  if (sharded != nullptr) {
    // Not on CUDA, which cannot rejoin in place yet (JobSession::RejoinGeneration).
    if (session_->live_recovery() && !device_.is_cuda()) {
      sharded->EnableReplicas(session_->replica_distance());
    }
    sharded->set_step(first_step_);
  }
  if (absl::Status st = ddp::AttachOptimizer(*optimizer_, *ddp_, precision_); !st.ok()) {
    return WithExitCode(absl::Status(st.code(), absl::StrCat("--zero: ", st.message())), kExitInternal);
  }
  if (!trace_) trace_ = std::make_unique<TraceWriter>(!opt_.trace_path.empty(), rank_);
  return absl::OkStatus();
}

absl::Status WorkerRun::Heal(int heal_source, optim::ShardedOptimizer* sharded) {
  const auto t0 = Clock::now();
  // PSYNC_TEST_KILL's heal phase: the source (--zero: every rank sends; rank 0 stands for them).
  if (rank_ == std::max(heal_source, 0)) {
    test_kill::SetIteration(first_step_);
    test_kill::At("heal");
  }
  absl::Status healed;
  if (sharded != nullptr) {
    healed = sharded->Recover(*session_->group(), first_step_, opt_.timeout);
    // A lost shard (its replica's holder was lost too) ends the job as a
    // lost peer does under --recovery=restart: it resumes from a checkpoint.
    // A peer lost meanwhile: the next generation tries again.
    if (!healed.ok() && healed.code() != absl::StatusCode::kFailedPrecondition) {
      healed = WithExitCode(healed, kExitPeerLost);
    }
    // No rank can rebuild it now: every one exits (its state is no use), and
    // the new processes resume from the newest checkpoint.
    if (healed.code() == absl::StatusCode::kDataLoss) state_lost_ = true;
  } else {
    healed = HealFromPeer(CheckpointOptionsFrom(opt_), heal_source, session_->world_size(), first_step_, held_step_,
                          model_options_, *model_, *optimizer_, *session_->group(), opt_.timeout);
    // Why forget the state on damage: a rank at the start's step received
    // in place (a lost peer meanwhile leaves it the same bits; a damaged
    // piece does not).
    if (healed.code() == absl::StatusCode::kDataLoss) held_step_.reset();
  }
  PSYNC_RETURN_IF_ERROR(healed);
  const std::string how = sharded != nullptr ? "rebuilt the sharded state from the survivors' shards"
                          : rank_ == heal_source ? "healed the others from this rank's state"
                                                 : absl::StrCat("healed from rank ", heal_source);
  PSYNC_LOG(INFO) << how << " at step " << first_step_ << " ("
                  << absl::StrFormat("%.2f", std::chrono::duration<double>(Clock::now() - t0).count())
                  << " s; live recovery)";
  return absl::OkStatus();
}

void WorkerRun::PrintBanner() const {
  if (rank_ != 0 || opt_.quiet) return;
  std::printf("psync-worker: rank 0 of %d, %s on %s (--backend=%s: %s)\n  model %s%s\n  data %s%s\n"
              "  optimizer %s, lr %g (%s, warmup %lld), global batch %lld x %lld micro-batches, %lld steps\n",
              world_, session_->backend().c_str(), device_.ToString().c_str(), opt_.backend.c_str(),
              session_->backend_reason().c_str(), model_->Describe().c_str(),
              opt_.precision == "fp32" ? "" : absl::StrCat(", --precision=", opt_.precision).c_str(),
              data_->train->Describe().c_str(),
              data_->val ? absl::StrCat("; held out: ", data_->val->Describe()).c_str() : "", opt_.optimizer.c_str(),
              opt_.lr, opt_.lr_schedule.c_str(), static_cast<long long>(opt_.warmup_steps),
              static_cast<long long>(opt_.global_batch), static_cast<long long>(accumulate_),
              static_cast<long long>(opt_.steps));
  std::fflush(stdout);
}

TrainResult WorkerRun::Train() {
  TrainContext ctx;
  ctx.options = TrainOptionsFrom(opt_);
  ctx.options.accumulate = accumulate_;
  ctx.rank = rank_;
  ctx.world_size = world_;
  ctx.device = device_;
  ctx.train = data_->train.get();
  ctx.val = data_->val.get();
  ctx.model = model_.get();
  ctx.ddp = ddp_.get();
  ctx.optimizer = optimizer_.get();
  ctx.schedule = &*schedule_;
  ctx.group = session_->group().get();
  ctx.reports = session_->reports();
  ctx.plans = session_->mailbox();
  ctx.plan_lookahead = session_->plan_lookahead();
  ctx.trace = trace_.get();
  ctx.metrics = metrics_.get();
  ctx.first_step = first_step_;
  // The mailbox guards every write: no checkpoint once this generation is aborted.
  ctx.save_checkpoint = MakeCheckpointSaver(CheckpointOptionsFrom(opt_), rank_, world_, model_options_, model_.get(),
                                            optimizer_.get(), session_->mailbox(), session_->generation());
  PrintBanner();
  return runtime::Train(ctx);
}

void WorkerRun::Outputs(TrainResult& tr) {
  // A regroup's stop is not the end of the job: the next generation saves.
  // A run whose final evaluation failed saves too: its weights are final.
  if ((tr.exit_code == kExitOk || tr.trained) && !tr.regroup && rank_ == 0 && !opt_.save_path.empty()) {
    absl::Status st = SaveWeights(CheckpointOptionsFrom(opt_), world_, model_options_, *model_, tr.steps_completed);
    if (!st.ok() && tr.exit_code == kExitOk) {
      tr.exit_code = kExitInternal;
      tr.reason = std::string(st.message());
    } else if (!st.ok()) {
      PSYNC_LOG(WARNING) << st.message();
    } else if (tr.exit_code != kExitOk) {
      tr.reason += absl::StrCat(" (the weights of all ", tr.steps_completed, " steps are saved: --save ",
                                opt_.save_path, ")");
    }
  }
  if (!opt_.trace_path.empty()) {
    absl::Status st = trace_->Write(ExpandRank(opt_.trace_path, rank_));
    if (!st.ok()) PSYNC_LOG(WARNING) << st.message();
  }
  if (rank_ == 0 && !opt_.quiet) {
    RunSummary s;
    s.step_ms = tr.step_ms;
    std::string val;
    if (std::isfinite(tr.val_loss)) val = absl::StrFormat("; validation loss %.4f", tr.val_loss);
    if (std::isfinite(tr.val_accuracy)) absl::StrAppendFormat(&val, ", accuracy %.2f%%", 100 * tr.val_accuracy);
    std::printf("psync-worker: %s; final loss %.6f%s; median step %.3f ms, p90 %.3f ms\n", tr.reason.c_str(),
                tr.final_loss, val.c_str(), s.median_step_ms(), s.p90_step_ms());
    std::fflush(stdout);
  }
}

WorkerExit WorkerRun::Finish(int code, const std::string& reason, const TrainResult* tr) {
  session_->Finish(code, reason);
  if (!opt_.summary_path.empty()) {
    RunSummary s;
    s.rank = rank_;
    s.world_size = world_;
    s.steps_requested = opt_.steps;
    s.backend = session_->backend();
    s.device = device_.ToString();
    s.model = model_->Describe();
    s.data = data_->train->Describe();
    s.exit_reason = reason;
    s.exit_code = code;
    s.final_loss = s.val_loss = s.val_accuracy = std::nan("");
    if (tr) {
      s.steps_completed = tr->steps_completed;
      s.final_loss = tr->final_loss;
      s.val_loss = tr->val_loss;
      s.val_accuracy = tr->val_accuracy;
      s.items_per_s = tr->items_per_s;
      s.step_ms = tr->step_ms;
      s.activation_bytes = tr->activation_bytes;
    }
    s.total_s = std::chrono::duration<double>(Clock::now() - started_).count();
    if (ddp_) {  // the memory this rank holds (1/W of the optimizer state with --zero)
      s.optimizer_state_bytes = optimizer_->state_bytes();
      s.gradient_bytes = ddp_->reducer().gradient_bytes();
      s.parameter_bytes = ddp_->reducer().parameter_bytes();
      if (opt_.zero == 3) s.parameter_window_bytes = ddp_->reducer().zero_buckets()->parameter_window_bytes();
      if (device_.is_cuda()) s.peak_device_bytes = PeakDeviceBytes(device_);
    }
    absl::Status st = s.WriteJson(ExpandRank(opt_.summary_path, rank_));
    if (!st.ok()) PSYNC_LOG(WARNING) << st.message();
  }
  return WorkerExit{code, reason, rank_};
}

absl::Status WorkerRun::JoinJob(const control::StartOffer& offer, bool rejoin) {
  control::SessionOptions session_options = SessionOptionsFrom(opt_);
  // Why: ranks whose flags differ beyond the shapes (another --n-head, --lr
  // or --steps) would train different jobs and average each other's
  // gradients; the coordinator compares these at Join and refuses them.
  session_options.settings = JobFingerprint(opt_, model_options_, *data_->train, data_->val.get());
  absl::StatusOr<std::unique_ptr<control::JobSession>> session =
      rejoin ? control::JobSession::Rejoin(session_options, device_, model_->named_parameters(), offer)
             : control::JobSession::Start(session_options, device_, model_->named_parameters(), offer);
  if (!session.ok()) return session.status();
  session_ = std::move(*session);
  rank_ = session_->rank();
  world_ = session_->world_size();
  return absl::OkStatus();
}

int64_t WorkerRun::RejoinGeneration(int code) const {
  if (state_lost_) return 0;
  // --zero rejoins in place where its shards have replicas (live recovery on).
  return session_ ? session_->RejoinGeneration(code, opt_.zero, session_->live_recovery()) : 0;
}

absl::Status WorkerRun::RejoinLive(int64_t generation) {
  PSYNC_LOG(INFO) << "generation " << session_->generation() << " ended (" << session_->mailbox()->failure().message()
                  << "); rejoining generation " << generation
                  << (held_step_ ? absl::StrCat(" with the state of step ", *held_step_) : " as a fresh process")
                  << " (live recovery)";
  // Why this order: the reducer holds the old group; the old session's
  // watchdog would end the process if it outlived the training it guards.
  ddp_.reset();
  session_->Leave();
  session_.reset();
  // The interrupted iteration's gradients are dropped: it is computed again.
  optimizer_->ZeroGrad(/*set_to_none=*/true);
  control::StartOffer offer;
  offer.generation = generation;
  offer.live_step = held_step_;
  if (!held_step_) {  // as at the first start
    offer.agree = opt_.resume;
    offer.checkpoint_steps = resume_.steps;
  }
  live_ = held_step_.has_value();
  PSYNC_RETURN_IF_ERROR(JoinJob(offer, /*rejoin=*/true));
  return SetUpTraining();
}

WorkerExit WorkerRun::Run() {
  rank_ = opt_.rank;
  if (rank_ >= 0) SetLogRank(rank_);
  if (absl::Status st = Prepare(); !st.ok()) {
    WorkerExit e = ExitFor(st, kExitBadInput);
    e.rank = rank_;
    return e;
  }
  // A killed job's shared-memory segments go at the next job's start.
  if (!device_.is_cuda()) comm::shm::RemoveStaleSegments();

  control::StartOffer offer;  // --resume: the coordinator picks among the checkpoints this rank can load
  offer.agree = opt_.resume;
  offer.checkpoint_steps = resume_.steps;
  if (absl::Status st = JoinJob(offer); !st.ok()) {
    WorkerExit e = ExitFor(st, kExitRendezvous);
    e.rank = rank_;
    return e;
  }
  absl::Status setup = SetUpTraining();
  TrainResult tr;
  while (true) {
    if (setup.ok()) {
      tr = Train();
      held_step_ = tr.steps_completed;  // a failed step applied nothing
      // --zero: a step whose replica shifts or parameter gathers did not
      // complete here is not one this rank can vouch for (shard_records.h).
      auto* sharded = dynamic_cast<optim::ShardedOptimizer*>(optimizer_.get());
      if (sharded != nullptr && tr.exit_code != 0 && !sharded->LastStepWhole()) held_step_ = sharded->step() - 1;
    }
    // Live recovery: a lost peer ended the generation (also one that was
    // still forming or healing), this process stays.
    const int64_t next = RejoinGeneration(setup.ok() ? tr.exit_code : ExitCodeOf(setup, kExitInternal));
    if (next == 0) break;
    setup = RejoinLive(next);
    if (!session_) {  // the Join itself failed: nobody to tell
      WorkerExit e = ExitFor(setup, kExitRendezvous);
      e.rank = rank_;
      return e;
    }
  }
  if (!setup.ok()) return Finish(ExitCodeOf(setup, kExitInternal), std::string(setup.message()), nullptr);
  Outputs(tr);
  return Finish(tr.exit_code, tr.reason, &tr);
}

}  // namespace

int RunWorker(const WorkerOptions& opt) {
  WorkerExit e;
  {
    // Every object of the run (process group, client) is gone before the
    // reason is printed, so it is the last line on stderr.
    WorkerRun run(opt);
    e = run.Run();
  }
  std::fflush(stdout);
  // psync-launch shows every rank's stderr: the line says whose it is.
  if (e.rank >= 0) {
    std::fprintf(stderr, "psync-worker rank %d: %s\n", e.rank, e.reason.c_str());
  } else {
    std::fprintf(stderr, "psync-worker: %s\n", e.reason.c_str());
  }
  std::fflush(stderr);
  return e.code;
}

}  // namespace psync::runtime
