#include "worker/runtime/worker.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "worker/comm/shm/segment_name.h"
#include "worker/data/registry.h"
#include "worker/ddp/compression_hook.h"
#include "worker/ddp/ddp.h"
#include "worker/optim/registry.h"
#include "worker/optim/schedule.h"
#include "worker/runtime/checkpointing.h"
#include "worker/runtime/exit_codes.h"
#include "worker/runtime/job_session.h"
#include "worker/runtime/metrics_writer.h"
#include "worker/runtime/model_builder.h"
#include "worker/runtime/plan_pump.h"
#include "worker/runtime/summary.h"
#include "worker/runtime/trace_writer.h"
#include "worker/runtime/trainer.h"
#include "worker/tensor/cuda/cuda_device.h"  // SetCurrentDevice

namespace psync::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// The one-line reason is printed by RunWorker after every object of the run
// (process group, client) is gone, so it is the last line on stderr.
thread_local std::string* g_reason = nullptr;
// The rank once known (requested or assigned by Join), for the last line:
// psync-launch shows every rank's stderr, so the line must say whose it is.
thread_local int g_rank = -1;
int Exit(int code, const std::string& reason) {
  if (g_reason) *g_reason = reason;
  return code;
}
int Exit(const absl::Status& st, int fallback) { return Exit(ExitCodeOf(st, fallback), std::string(st.message())); }

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
    try {
      cuda_device::SetCurrentDevice(device->index);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("--device ", text, ": ", e.what()));
    }
  }
  return device;
}

data::DataOptions DataOptionsFor(const WorkerOptions& opt) {
  data::DataOptions d = opt.data;
  if (opt.model == "gpt") d.vocab_size = opt.vocab_size;  // shards check their ids against it
  if (opt.model == "mlp") {  // rows: x and y widths are the MLP's ends
    d.rows_in = opt.widths.front();
    d.rows_out = opt.widths.back();
  }
  return d;
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> BuildOptimizer(const WorkerOptions& opt, const nn::Module& model) {
  optim::OptimizerArgs args;
  args.params = model.named_parameters();
  args.options.momentum = opt.momentum;
  args.options.weight_decay = opt.weight_decay;
  args.options.beta1 = opt.beta1;
  args.options.beta2 = opt.beta2;
  args.options.eps = opt.eps;
  return optim::Optimizers().Create(opt.optimizer, args);
}

absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> BuildDdp(const WorkerOptions& opt,
                                                                       std::shared_ptr<nn::Model> model,
                                                                       JobSession& session) {
  ddp::DdpOptions dopt;
  dopt.bucket_cap_mb = opt.bucket_cap_mb;
  dopt.first_bucket_cap_mb = opt.first_bucket_mb;
  dopt.find_unused_parameters = opt.find_unused_parameters;
  dopt.timeout = opt.timeout;
  dopt.rebuild = ddp::RebuildMode::kExternal;
  dopt.comm_hook = *ddp::CommHookFromFlag(opt.grad_compression);  // validated with the flags
  auto source = std::make_shared<CoordinatorUnusedSource>(session.mailbox());
  absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> ddp =
      ddp::DistributedDataParallel::Create(std::move(model), session.group(), dopt, source);
  if (!ddp.ok()) {
    const int code = session.fatal_code()->load();
    return WithExitCode(absl::Status(ddp.status().code(), absl::StrCat("setting up DDP: ", ddp.status().message())),
                        code ? code : kExitRendezvous);
  }
  if (!session.initial_bucket_plan().empty()) {
    if (absl::Status st = (*ddp)->reducer().ApplyBucketPlan(session.initial_bucket_plan()); !st.ok()) {
      return WithExitCode(absl::Status(st.code(), absl::StrCat("initial bucket plan: ", st.message())), kExitInternal);
    }
  }
  return ddp;
}

int RunWorkerImpl(const WorkerOptions& opt) {
  const auto started = Clock::now();
  if (opt.rank >= 0) SetLogRank(opt.rank);
  g_rank = opt.rank;

  // ---- build data, model, optimizer: bad input fails here (exit 2), before joining.
  absl::StatusOr<Device> device = SetUpDevice(opt);
  if (!device.ok()) return Exit(device.status(), kExitBadInput);
  absl::StatusOr<data::OpenedData> data = data::Open(DataOptionsFor(opt));
  if (!data.ok()) return Exit(data.status(), kExitBadInput);
  absl::StatusOr<BuiltModel> built = BuildModel(opt, data->train->info(), *device);
  if (!built.ok()) return Exit(built.status(), kExitBadInput);
  std::shared_ptr<nn::Model> model = std::move(built->model);
  absl::StatusOr<std::unique_ptr<optim::Optimizer>> optimizer = BuildOptimizer(opt, *model);
  if (!optimizer.ok()) return Exit(optimizer.status(), kExitBadInput);
  absl::StatusOr<int64_t> first_step = ResumeFromCheckpoint(opt, *model, **optimizer);
  if (!first_step.ok()) return Exit(first_step.status(), kExitBadInput);
  absl::StatusOr<optim::LrSchedule> schedule =
      optim::LrSchedule::Create(opt.lr_schedule, opt.lr, opt.warmup_steps, std::max<int64_t>(1, opt.steps));
  if (!schedule.ok()) return Exit(schedule.status(), kExitBadInput);
  // A killed job's shared-memory segments go at the next job's start.
  if (!device->is_cuda()) comm::shm::RemoveStaleSegments();

  // ---- join the job: rank, group, plans.
  absl::StatusOr<std::unique_ptr<JobSession>> session = JobSession::Start(opt, *device, model->named_parameters(), *first_step);
  if (!session.ok()) return Exit(session.status(), kExitRendezvous);
  JobSession& job = **session;
  const int rank = job.rank(), world = job.world_size();
  g_rank = rank;
  auto finish = [&](int code, const std::string& reason, const TrainResult* tr) {
    job.Finish(code, reason);
    if (!opt.summary_path.empty()) {
      RunSummary s;
      s.rank = rank;
      s.world_size = world;
      s.steps_requested = opt.steps;
      s.backend = job.backend();
      s.device = device->ToString();
      s.model = model->Describe();
      s.data = data->train->Describe();
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
      }
      s.total_s = std::chrono::duration<double>(Clock::now() - started).count();
      absl::Status st = s.WriteJson(ExpandRank(opt.summary_path, rank));
      if (!st.ok()) PSYNC_LOG(WARNING) << st.message();
    }
    return Exit(code, reason);
  };
  if (absl::Status st = ValidateBatchGeometry(opt, world); !st.ok()) return finish(kExitBadInput, std::string(st.message()), nullptr);
  std::unique_ptr<MetricsWriter> metrics;
  if (!opt.metrics_path.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsWriter>> m = MetricsWriter::Open(ExpandRank(opt.metrics_path, rank));
    if (!m.ok()) return finish(kExitBadInput, std::string(m.status().message()), nullptr);
    metrics = std::move(*m);
  }
  absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> ddp = BuildDdp(opt, model, job);
  if (!ddp.ok()) return finish(ExitCodeOf(ddp.status(), kExitInternal), std::string(ddp.status().message()), nullptr);

  // ---- train
  TraceWriter trace(!opt.trace_path.empty(), rank);
  TrainContext ctx;
  ctx.options = &opt;
  ctx.rank = rank;
  ctx.world_size = world;
  ctx.device = *device;
  ctx.train = data->train.get();
  ctx.val = data->val.get();
  ctx.model = model.get();
  ctx.ddp = ddp->get();
  ctx.optimizer = optimizer->get();
  ctx.schedule = &*schedule;
  ctx.group = job.group().get();
  ctx.reports = job.reports();
  ctx.plans = job.mailbox();
  ctx.plan_lookahead = job.plan_lookahead();
  ctx.trace = &trace;
  ctx.metrics = metrics.get();
  ctx.fatal_code = job.fatal_code();
  ctx.first_step = *first_step;
  ctx.save_checkpoint = MakeCheckpointSaver(opt, rank, world, built->options, model.get(), optimizer->get());
  ctx.checkpoint_every = opt.checkpoint_every;
  if (rank == 0 && !opt.quiet) {
    std::printf("psync-worker: rank 0 of %d, %s on %s (--backend=%s: %s)\n  model %s\n  data %s%s\n"
                "  optimizer %s, lr %g (%s, warmup %lld), global batch %lld x %lld micro-batches, %lld steps\n",
                world, job.backend().c_str(), device->ToString().c_str(), opt.backend.c_str(),
                job.backend_reason().c_str(), model->Describe().c_str(), data->train->Describe().c_str(),
                data->val ? absl::StrCat("; held out: ", data->val->Describe()).c_str() : "", opt.optimizer.c_str(),
                opt.lr, opt.lr_schedule.c_str(), static_cast<long long>(opt.warmup_steps),
                static_cast<long long>(opt.global_batch), static_cast<long long>(opt.accumulate),
                static_cast<long long>(opt.steps));
    std::fflush(stdout);
  }
  TrainResult tr = Train(ctx);

  // ---- save
  if (tr.exit_code == kExitOk && rank == 0 && !opt.save_path.empty()) {
    absl::Status st = SaveWeights(opt, world, built->options, *model, tr.steps_completed);
    if (!st.ok()) {
      tr.exit_code = kExitInternal;
      tr.reason = std::string(st.message());
    }
  }
  if (!opt.trace_path.empty()) {
    absl::Status st = trace.Write(ExpandRank(opt.trace_path, rank));
    if (!st.ok()) PSYNC_LOG(WARNING) << st.message();
  }
  if (rank == 0 && !opt.quiet) {
    RunSummary s;
    s.step_ms = tr.step_ms;
    std::string val;
    if (std::isfinite(tr.val_loss)) val = absl::StrFormat("; validation loss %.4f", tr.val_loss);
    if (std::isfinite(tr.val_accuracy)) absl::StrAppendFormat(&val, ", accuracy %.2f%%", 100 * tr.val_accuracy);
    std::printf("psync-worker: %s; final loss %.6f%s; median step %.3f ms, p90 %.3f ms\n", tr.reason.c_str(),
                tr.final_loss, val.c_str(), s.median_step_ms(), s.p90_step_ms());
    std::fflush(stdout);
  }
  return finish(tr.exit_code, tr.reason, &tr);
}

}  // namespace

int RunWorker(const WorkerOptions& opt) {
  std::string reason;
  g_reason = &reason;
  const int code = RunWorkerImpl(opt);
  g_reason = nullptr;
  std::fflush(stdout);
  if (g_rank >= 0) {
    std::fprintf(stderr, "psync-worker rank %d: %s\n", g_rank, reason.c_str());
  } else {
    std::fprintf(stderr, "psync-worker: %s\n", reason.c_str());
  }
  std::fflush(stderr);
  return code;
}

}  // namespace psync::runtime
