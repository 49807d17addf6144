#include "worker/runtime/worker.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "worker/comm/backend_choice.h"
#include "worker/comm/process_group_factory.h"
#include "worker/comm/shm/segment_name.h"
#include "worker/ddp/compression_hook.h"
#include "worker/ddp/ddp.h"
#include "worker/nn/models/mlp.h"
#include "worker/nn/state_dict.h"
#include "worker/runtime/checkpoint/safetensors.h"
#include "worker/runtime/coordinator/coordinator_client.h"
#include "worker/runtime/coordinator/coordinator_store.h"
#include "worker/runtime/dataset.h"
#include "worker/runtime/host_identity.h"
#include "worker/runtime/plan_source.h"
#include "worker/runtime/summary.h"
#include "worker/runtime/trace_writer.h"
#include "worker/runtime/trainer.h"
#include "worker/tensor/cuda/cuda_device.h"  // SetCurrentDevice

namespace psync::runtime {

namespace {

using Clock = std::chrono::steady_clock;
namespace coord = ::psync::coordinator;

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

ddp::BucketPlan ToDdpPlan(const coord::BucketPlan& p) {
  ddp::BucketPlan out;
  for (const auto& b : p.buckets) {
    std::vector<size_t> bucket;
    for (int i : b) bucket.push_back(static_cast<size_t>(i));
    out.push_back(std::move(bucket));
  }
  return out;
}

// What this rank knows about its host before the exchange (comm/topology.h).
comm::LocalHostHint HostHint(const WorkerOptions& opt) {
  comm::LocalHostHint h;
  if (const char* id = std::getenv("PSYNC_HOST_ID")) h.host_id = id;
  if (opt.local_world_size > 0) {
    h.local_rank = opt.local_rank;
    h.local_world_size = opt.local_world_size;
  }
  return h;
}

IterationPlan ToIterationPlan(const coord::Plan& p, size_t num_params) {
  IterationPlan out;
  out.iteration = p.iteration;
  out.globally_unused = UnpackBitmap(p.globally_unused, num_params);
  if (p.bucket_plan) {
    out.bucket_plan = ToDdpPlan(*p.bucket_plan);
    out.bucket_plan_id = p.bucket_plan->id;
    out.applies_from = p.bucket_plan->applies_from_iteration;
  }
  switch (p.action) {
    case coord::Action::kContinue: out.action = PlanAction::kContinue; break;
    case coord::Action::kStopAfter: out.action = PlanAction::kStopAfter; break;
    case coord::Action::kAbort: out.action = PlanAction::kAbort; break;
  }
  out.reason = p.reason;
  out.stop_after = p.stop_after_iteration;
  return out;
}

class ClientReports : public ReportChannel {
 public:
  explicit ClientReports(coord::CoordinatorClient* client) : client_(client) {}
  absl::Status SendReport(int64_t iteration, const std::vector<uint8_t>& used, double loss, double last_step_ms,
                          const std::vector<size_t>& ready_order) override {
    coord::Report r;
    r.iteration = iteration;
    r.used_bitmap = PackBitmap(used);
    r.loss = std::isfinite(loss) ? loss : 0.0;
    r.last_step_ms = last_step_ms;
    for (size_t i : ready_order) r.ready_order.push_back(static_cast<int>(i));
    return client_->SendReport(r);
  }

 private:
  coord::CoordinatorClient* client_;
};

// Reads plans from the client in iteration order into the mailbox. On ABORT
// or a lost coordinator it aborts the process group (so a blocked collective
// returns) and, if the training thread still has not finished after a grace
// period, ends the process itself: the exit bound holds even when a backend
// cannot be unblocked.
class PlanPump {
 public:
  PlanPump(coord::CoordinatorClient* client, std::shared_ptr<PlanMailbox> mailbox,
           std::shared_ptr<comm::ProcessGroup> group, size_t num_params)
      : client_(client), mailbox_(std::move(mailbox)), group_(std::move(group)), num_params_(num_params),
        thread_([this] { Run(); }) {}
  ~PlanPump() { Stop(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  const std::atomic<int>* fatal_code() const { return &fatal_; }

 private:
  void Run() {
    int64_t next = 0;
    while (!stopping()) {
      absl::StatusOr<coord::Plan> plan = client_->WaitPlan(next, std::chrono::milliseconds(250));
      if (stopping()) return;
      if (plan.ok()) {
        IterationPlan ip = ToIterationPlan(*plan, num_params_);
        const bool abort = ip.action == PlanAction::kAbort;
        const std::string reason = ip.reason;
        if (abort) ip.iteration = std::max<int64_t>(ip.iteration, next);
        mailbox_->Deliver(std::move(ip));
        if (abort) {
          Fatal(kExitPeerLost, absl::StrCat("job aborted: ", reason.empty() ? "aborted by the coordinator" : reason));
          return;
        }
        ++next;
        continue;
      }
      if (plan.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
      mailbox_->Close(plan.status());
      Fatal(kExitCoordinatorLost, absl::StrCat("coordinator lost: ", std::string(plan.status().message())));
      return;
    }
  }

  bool stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }

  void Fatal(int code, const std::string& reason) {
    fatal_.store(code);
    if (group_) group_->Abort(absl::AbortedError(reason));
    // Watchdog: the training thread normally notices within a moment and
    // exits cleanly (Stop() wakes us). Otherwise end the process.
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(7), [this] { return stop_; })) {
      std::fprintf(stderr, "psync-worker: %s (training thread did not stop; exiting)\n", reason.c_str());
      std::fflush(stderr);
      std::fflush(stdout);
      _exit(code);
    }
  }

  coord::CoordinatorClient* client_;
  std::shared_ptr<PlanMailbox> mailbox_;
  std::shared_ptr<comm::ProcessGroup> group_;
  size_t num_params_;
  std::atomic<int> fatal_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::string> DeriveGlooHost(const std::string& coordinator) {
  const size_t colon = coordinator.rfind(':');
  std::string host = coordinator.substr(0, colon);
  const std::string port = coordinator.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") return std::string("127.0.0.1");
  struct addrinfo hints {};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  struct addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve coordinator host '", host, "': ", gai_strerror(rc)));
  }
  auto* sin = reinterpret_cast<sockaddr_in*>(res->ai_addr);
  if ((ntohl(sin->sin_addr.s_addr) >> 24) == 127) {
    freeaddrinfo(res);
    return std::string("127.0.0.1");
  }
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  std::string out;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {  // UDP: no packet is sent
    sockaddr_in local {};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      if (inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf))) out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (out.empty()) return absl::UnavailableError(absl::StrCat("no local address routes to coordinator ", coordinator));
  return out;
}

namespace {
int RunWorkerImpl(const WorkerOptions& opt);
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

namespace {
int RunWorkerImpl(const WorkerOptions& opt) {
  const auto started = Clock::now();
  if (opt.rank >= 0) SetLogRank(opt.rank);
  g_rank = opt.rank;

  // ---- device, data and initial weights: fail fast with exit 2, before joining.
  std::string device_text = opt.device == "cuda" ? absl::StrCat("cuda:", opt.local_rank) : opt.device;
  absl::StatusOr<Device> device = ParseDevice(device_text);
  if (!device.ok()) return Exit(kExitBadInput, absl::StrCat("--device: ", std::string(device.status().message())));
  if (absl::Status st = CheckDeviceAvailable(*device); !st.ok()) {
    return Exit(kExitBadInput, absl::StrCat("--device ", device_text, ": ", std::string(st.message())));
  }
  if (device->is_cuda()) {
    // Make cuda:LOCAL_RANK this thread's current device before any tensor
    // work: the ops' device guards would otherwise switch back to cuda:0
    // after each op and put a CUDA context on GPU 0 in every rank's process.
    try {
      cuda_device::SetCurrentDevice(device->index);
    } catch (const std::exception& e) {
      return Exit(kExitBadInput, absl::StrCat("--device ", device_text, ": ", e.what()));
    }
  }
  const int64_t in = opt.widths.front(), out = opt.widths.back();
  Dataset data;
  if (!opt.data_path.empty()) {
    absl::StatusOr<Dataset> d = LoadDataset(opt.data_path, in, out);
    if (!d.ok()) return Exit(kExitBadInput, std::string(d.status().message()));
    data = std::move(*d);
  } else {
    data = SyntheticDataset(opt.seed, opt.synthetic_rows, in, out);
  }
  std::shared_ptr<nn::MLP> model;
  try {
    model = std::make_shared<nn::MLP>(opt.widths, *device, opt.seed);
  } catch (const std::exception& e) {
    return Exit(kExitInternal, absl::StrCat("building the model: ", e.what()));
  }
  if (!opt.init_path.empty()) {
    absl::StatusOr<NamedTensors> init = LoadInit(opt.init_path, opt.widths);
    if (!init.ok()) return Exit(kExitBadInput, std::string(init.status().message()));
    std::map<std::string, Tensor> state(init->begin(), init->end());
    if (absl::Status st = nn::LoadStateDict(*model, state); !st.ok()) {
      return Exit(kExitBadInput, absl::StrCat("--init ", opt.init_path, ": ", std::string(st.message())));
    }
  }
  const auto named = model->named_parameters();
  // A killed job's shared-memory segments go at the next job's start.
  if (!device->is_cuda()) comm::shm::RemoveStaleSegments();

  // ---- rendezvous
  absl::StatusOr<std::unique_ptr<coord::CoordinatorClient>> client =
      coord::CoordinatorClient::Connect(opt.coordinator, opt.token, opt.timeout, opt.tls_ca);
  if (!client.ok()) {
    return Exit(kExitRendezvous, absl::StrCat("cannot reach the coordinator at ", opt.coordinator, ": ",
                                              std::string(client.status().message())));
  }
  absl::StatusOr<std::string> host_id = LocalHostId();
  if (!host_id.ok()) return Exit(kExitBadInput, std::string(host_id.status().message()));
  coord::JoinRequest req;
  req.job_id = opt.job_id;
  req.host_id = *host_id;
  req.requested_rank = opt.rank;
  req.world_size = opt.world_size;
  req.device = device->ToString();
  req.backend = opt.backend;  // as requested: every rank must ask for the same
  for (const auto& [name, p] : named) req.manifest.push_back({name, p.shape(), 4});
  req.bucket_cap_bytes = static_cast<int64_t>(opt.bucket_cap_mb * 1024 * 1024);
  req.first_bucket_cap_bytes = static_cast<int64_t>(opt.first_bucket_mb * 1024 * 1024);
  absl::StatusOr<coord::JoinResult> joined = (*client)->Join(req, std::chrono::hours(1));
  if (!joined.ok()) {
    return Exit(kExitRendezvous, absl::StrCat("rendezvous failed: ", std::string(joined.status().message())));
  }
  const int rank = joined->rank, world = joined->world_size;
  SetLogRank(rank);
  g_rank = rank;
  if (absl::Status st = ValidateBatchGeometry(opt, world); !st.ok()) {
    return Exit(kExitBadInput, std::string(st.message()));
  }

  // ---- data plane
  auto store = std::make_shared<coord::CoordinatorStore>(client->get(), joined->store_prefix);
  comm::GroupOptions gopt;
  gopt.timeout = opt.timeout;
  gopt.prefix = "pg0";
  gopt.device = device->is_cuda() ? device->index : -1;
  // Which ranks share this host: PLUG-IN POINT for the coordinator's host
  // ids (helper `coord`): once JoinResult carries every rank's host id, use
  // comm::Topology::FromHostIds(those ids) here instead of the exchange.
  absl::StatusOr<comm::Topology> topology = comm::ExchangeTopology(*store, rank, world, HostHint(opt), opt.timeout);
  if (!topology.ok()) {
    return Exit(topology.status().code() == absl::StatusCode::kInvalidArgument ? kExitBadInput : kExitRendezvous,
                absl::StrCat("host layout: ", std::string(topology.status().message())));
  }
  absl::StatusOr<comm::BackendChoice> choice = comm::ChooseBackend(opt.backend, *topology, world, device->is_cuda());
  if (!choice.ok()) return Exit(kExitBadInput, std::string(choice.status().message()));
  const std::string backend = choice->backend;
  gopt.topology = *topology;
  gopt.job_tag = absl::StrCat(opt.job_id, ".g", joined->generation);
  if (!opt.gloo_host.empty()) {
    gopt.hostname = opt.gloo_host;
  } else {
    absl::StatusOr<std::string> host = DeriveGlooHost(opt.coordinator);
    if (!host.ok()) return Exit(kExitRendezvous, std::string(host.status().message()));
    gopt.hostname = *host;
  }
  absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> pg =
      comm::CreateProcessGroup(backend, store, rank, world, gopt);
  if (!pg.ok()) {
    return Exit(kExitRendezvous, absl::StrCat("creating the ", backend, " process group: ",
                                              std::string(pg.status().message())));
  }
  std::shared_ptr<comm::ProcessGroup> group(std::move(*pg));
  if (absl::Status st = (*client)->OpenTrainStream(rank, joined->generation); !st.ok()) {
    return Exit(kExitRendezvous, absl::StrCat("opening the train stream: ", std::string(st.message())));
  }
  auto mailbox = std::make_shared<PlanMailbox>();
  PlanPump pump(client->get(), mailbox, group, named.size());

  auto finish = [&](int code, const std::string& reason, const TrainResult* tr) {
    pump.Stop();
    (*client)->SendDone(reason, code).IgnoreError();
    (*client)->Close();
    if (!opt.summary_path.empty()) {
      RunSummary s;
      s.rank = rank;
      s.world_size = world;
      s.steps_requested = opt.steps;
      s.backend = backend;
      s.device = device->ToString();
      s.exit_reason = reason;
      s.exit_code = code;
      s.final_loss = std::nan("");
      if (tr) {
        s.steps_completed = tr->steps_completed;
        s.final_loss = tr->final_loss;
        s.step_ms = tr->step_ms;
      }
      s.total_s = std::chrono::duration<double>(Clock::now() - started).count();
      absl::Status st = s.WriteJson(ExpandRank(opt.summary_path, rank));
      if (!st.ok()) PSYNC_LOG(WARNING) << st.message();
    }
    return Exit(code, reason);
  };

  ddp::DdpOptions dopt;
  dopt.bucket_cap_mb = opt.bucket_cap_mb;
  dopt.first_bucket_cap_mb = opt.first_bucket_mb;
  dopt.find_unused_parameters = opt.find_unused_parameters;
  dopt.timeout = opt.timeout;
  dopt.rebuild = ddp::RebuildMode::kExternal;
  dopt.comm_hook = *ddp::CommHookFromFlag(opt.grad_compression);  // validated with the flags
  auto source = std::make_shared<CoordinatorUnusedSource>(mailbox);
  absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> ddp =
      ddp::DistributedDataParallel::Create(model, group, dopt, source);
  if (!ddp.ok()) {
    int code = pump.fatal_code()->load();
    return finish(code ? code : kExitRendezvous,
                  absl::StrCat("setting up DDP: ", std::string(ddp.status().message())), nullptr);
  }
  if (!joined->initial_bucket_plan.buckets.empty()) {
    if (absl::Status st = (*ddp)->reducer().ApplyBucketPlan(ToDdpPlan(joined->initial_bucket_plan)); !st.ok()) {
      return finish(kExitInternal, absl::StrCat("initial bucket plan: ", std::string(st.message())), nullptr);
    }
  }

  TraceWriter trace(!opt.trace_path.empty(), rank);
  ClientReports reports(client->get());
  TrainContext ctx;
  ctx.options = &opt;
  ctx.rank = rank;
  ctx.world_size = world;
  ctx.device = *device;
  ctx.data = &data;
  ctx.model = model;
  ctx.ddp = ddp->get();
  ctx.reports = &reports;
  ctx.plans = mailbox;
  ctx.plan_lookahead = joined->plan_lookahead;
  ctx.trace = &trace;
  ctx.fatal_code = pump.fatal_code();
  if (rank == 0 && !opt.quiet) {
    std::printf("psync-worker: rank 0 of %d, %s on %s (%s: %s), model mlp %s, data %s (%lld rows), %lld steps\n",
                world, backend.c_str(), device->ToString().c_str(), opt.backend.c_str(), choice->reason.c_str(),
                absl::StrJoin(opt.widths, ",").c_str(), data.source.c_str(), static_cast<long long>(data.rows), static_cast<long long>(opt.steps));
    std::fflush(stdout);
  }
  TrainResult tr = Train(ctx);

  if (tr.exit_code == kExitOk && rank == 0 && !opt.save_path.empty()) {
    absl::Status st = WriteSafetensors(opt.save_path, nn::StateDict(*model),
                                       {{"steps_completed", std::to_string(tr.steps_completed)}});
    if (!st.ok()) {
      tr.exit_code = kExitInternal;
      tr.reason = absl::StrCat("--save: ", std::string(st.message()));
    }
  }
  if (!opt.trace_path.empty()) {
    absl::Status st = trace.Write(ExpandRank(opt.trace_path, rank));
    if (!st.ok()) PSYNC_LOG(WARNING) << st.message();
  }
  if (rank == 0 && !opt.quiet) {
    RunSummary s;
    s.step_ms = tr.step_ms;
    std::printf("psync-worker: %s; final loss %.6f; median step %.3f ms, p90 %.3f ms\n", tr.reason.c_str(),
                tr.final_loss, s.median_step_ms(), s.p90_step_ms());
    std::fflush(stdout);
  }
  return finish(tr.exit_code, tr.reason, &tr);
}

}  // namespace

}  // namespace psync::runtime
