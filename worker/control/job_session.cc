#include "worker/control/job_session.h"

#include <chrono>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "psync/common/exit_code.h"
#include "psync/common/logging.h"
#include "psync/common/status_macros.h"
#include "common/used_bitmap.h"
#include "worker/comm/backend_choice.h"
#include "worker/comm/process_group_factory.h"
#include "worker/comm/topology.h"
#include "worker/control/coordinator_client.h"
#include "worker/control/coordinator_store.h"
#include "worker/control/failure_watchdog.h"
#include "worker/control/gloo_host.h"
#include "worker/control/host_identity.h"
#include "worker/control/unused_source.h"
#include "worker/ddp/reducer.h"

namespace psync::control {

namespace {

class ClientReports : public ReportChannel {
 public:
  explicit ClientReports(CoordinatorClient* client) : client_(client) {}
  absl::Status SendReport(int64_t iteration, const std::vector<uint8_t>& used, double loss, double last_step_ms,
                          const std::vector<size_t>& ready_order, double tokens_per_s) override {
    Report r;
    r.iteration = iteration;
    r.used_bitmap = bitmap::Pack(used);
    r.loss = std::isfinite(loss) ? loss : 0.0;
    r.last_step_ms = last_step_ms;
    r.tokens_per_s = std::isfinite(tokens_per_s) && tokens_per_s >= 0 ? tokens_per_s : 0.0;
    for (size_t i : ready_order) r.ready_order.push_back(static_cast<int>(i));
    return client_->SendReport(r);
  }

 private:
  CoordinatorClient* client_;
};

absl::Status Rendezvous(const std::string& what, const absl::Status& st) {
  return WithExitCode(absl::Status(st.code(), absl::StrCat(what, ": ", st.message())), kExitRendezvous);
}


}  // namespace

// Destruction order matters: the watchdog reads the mailbox and aborts the
// group, so it goes first (declared last); the client's reader delivers
// into the mailbox until the client is gone.
struct JobSession::State {
  std::shared_ptr<PlanMailbox> mailbox = std::make_shared<PlanMailbox>();
  std::unique_ptr<CoordinatorClient> client;
  JoinResult joined;
  comm::Topology topology;
  comm::BackendChoice choice;
  std::shared_ptr<comm::ProcessGroup> group;
  std::unique_ptr<ClientReports> reports;
  std::unique_ptr<FailureWatchdog> watchdog;
  Device device;  // the training's (live recovery heals host tensors only)
  bool finished = false;

  absl::Status Join(const SessionOptions& opt, Device device,
                    const std::vector<std::pair<std::string, autograd::Variable>>& params, const StartOffer& start);
  absl::Status ChooseBackend(const SessionOptions& opt, Device device);
  absl::Status CreateGroup(const SessionOptions& opt, Device device);
  absl::Status OpenTrainStream(const SessionOptions& opt);
};

absl::Status JobSession::State::Join(const SessionOptions& opt, Device device,
                                     const std::vector<std::pair<std::string, autograd::Variable>>& params,
                                     const StartOffer& start) {
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> c =
      CoordinatorClient::Connect(opt.coordinator, opt.token, opt.timeout, opt.tls_ca);
  if (!c.ok()) return Rendezvous(absl::StrCat("cannot reach the coordinator at ", opt.coordinator), c.status());
  client = std::move(*c);

  absl::StatusOr<std::string> host_id = LocalHostId();
  if (!host_id.ok()) return WithExitCode(host_id.status(), kExitBadInput);
  JoinRequest req;
  req.job_id = opt.job_id;
  req.host_id = *host_id;
  req.requested_rank = opt.rank;
  req.world_size = opt.world_size;
  req.global_batch = opt.global_batch;
  req.settings = opt.settings;
  req.device = device.ToString();
  req.backend = opt.backend;  // as requested: every rank must ask for the same
  // A resumed run starts at a checkpoint's step: either this rank's own
  // (the coordinator checks that every rank sends the same), or, agreeing,
  // the newest step every rank lists, which the coordinator picks once the
  // world is complete; its plans start there.
  req.start_iteration = start.start_iteration;
  req.agree_resume = start.agree;
  req.checkpoint_steps = start.checkpoint_steps;
  req.generation = start.generation;
  req.live_step = start.live_step;
  for (const auto& [name, p] : params) {
    req.manifest.push_back({name, p.shape(), static_cast<int>(p.data().element_size())});
  }
  req.bucket_caps = opt.bucket_caps;
  absl::StatusOr<JoinResult> j = client->Join(req, std::chrono::hours(1));
  // Why retry: the coordinator may be restarting (failover); a new one
  // forms the world from the Joins that come again.
  const auto deadline = std::chrono::steady_clock::now() + opt.coordinator_grace;
  while (!j.ok() && absl::IsUnavailable(j.status()) && std::chrono::steady_clock::now() < deadline) {
    PSYNC_LOG(WARNING) << "Join failed (" << j.status().message() << "); retrying while the coordinator may restart";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    j = client->Join(req, std::chrono::hours(1));
  }
  if (!j.ok()) return Rendezvous("rendezvous failed", j.status());
  joined = std::move(*j);
  SetLogRank(joined.rank);
  return absl::OkStatus();
}

absl::Status JobSession::State::ChooseBackend(const SessionOptions& opt, Device device) {
  // Which ranks share a host: the coordinator collected every rank's host id
  // at Join (PSYNC_HOST_ID, else hostname + boot id + mount namespace).
  absl::StatusOr<comm::Topology> t = comm::Topology::FromHostIds(joined.host_ids);
  if (!t.ok()) return Rendezvous("host layout", t.status());
  topology = *t;
  if (opt.local_world_size > 0) {
    const int local = topology.local_size(joined.rank);
    if (local != opt.local_world_size) {
      PSYNC_LOG(WARNING) << "LOCAL_WORLD_SIZE=" << opt.local_world_size << " but " << local
                         << " ranks share this host by the coordinator's host ids; using the host ids";
    }
  }
  absl::StatusOr<comm::BackendChoice> c = comm::ChooseBackend(opt.backend, topology, joined.world_size, device.is_cuda());
  if (!c.ok()) return WithExitCode(c.status(), kExitBadInput);
  choice = *c;
  return absl::OkStatus();
}

absl::Status JobSession::State::CreateGroup(const SessionOptions& opt, Device device) {
  auto store = std::make_shared<CoordinatorStore>(client.get(), joined.store_prefix);
  comm::GroupOptions gopt;
  gopt.timeout = opt.timeout;
  gopt.prefix = "pg0";
  gopt.device = device.is_cuda() ? device.index : -1;
  gopt.topology = topology;
  gopt.job_tag = absl::StrCat(opt.job_id, ".g", joined.generation);
  if (!opt.gloo_host.empty()) {
    gopt.hostname = opt.gloo_host;
  } else {
    absl::StatusOr<std::string> host = DeriveGlooHost(opt.coordinator);
    if (!host.ok()) return Rendezvous("Gloo address", host.status());
    gopt.hostname = *host;
  }
  absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> pg =
      comm::CreateProcessGroup(choice.backend, store, joined.rank, joined.world_size, gopt);
  if (!pg.ok()) return Rendezvous(absl::StrCat("creating the ", choice.backend, " process group"), pg.status());
  group = std::move(*pg);
  return absl::OkStatus();
}

absl::Status JobSession::State::OpenTrainStream(const SessionOptions& opt) {
  if (!opt.plan_relay.empty()) {
    // Why: the host's relay carries this rank's Train stream to the
    // coordinator together with the host's other ranks (client/relay/README.md).
    if (absl::Status st = client->UseTrainRelay(opt.plan_relay, opt.timeout); !st.ok()) {
      return Rendezvous("reaching the plan relay", st);
    }
  }
  client->RideThroughLoss(opt.coordinator_grace);
  if (absl::Status st = client->OpenTrainStream(joined.rank, joined.generation, mailbox); !st.ok()) {
    return Rendezvous("opening the train stream", st);
  }
  reports = std::make_unique<ClientReports>(client.get());
  watchdog = std::make_unique<FailureWatchdog>(
      mailbox, [g = group](const absl::Status& reason) { g->Abort(reason); });
  return absl::OkStatus();
}

JobSession::JobSession(std::unique_ptr<State> state) : s_(std::move(state)) {}

JobSession::~JobSession() { Finish(kExitInternal, "worker ended without a reason"); }

absl::StatusOr<std::unique_ptr<JobSession>> JobSession::Start(
    const SessionOptions& opt, Device device, const std::vector<std::pair<std::string, autograd::Variable>>& params,
    const StartOffer& start) {
  auto s = std::make_unique<State>();
  s->device = device;
  PSYNC_RETURN_IF_ERROR(s->Join(opt, device, params, start));
  PSYNC_RETURN_IF_ERROR(s->ChooseBackend(opt, device));
  PSYNC_RETURN_IF_ERROR(s->CreateGroup(opt, device));
  PSYNC_RETURN_IF_ERROR(s->OpenTrainStream(opt));
  return std::unique_ptr<JobSession>(new JobSession(std::move(s)));
}

absl::StatusOr<std::unique_ptr<JobSession>> JobSession::Rejoin(
    const SessionOptions& opt, Device device, const std::vector<std::pair<std::string, autograd::Variable>>& params,
    StartOffer offer) {
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<std::unique_ptr<JobSession>> session = Start(opt, device, params, offer);
    if (session.ok()) return session;
    const absl::StatusCode c = session.status().code();
    const bool peer_lost = c == absl::StatusCode::kUnavailable || c == absl::StatusCode::kAborted ||
                           c == absl::StatusCode::kInternal || c == absl::StatusCode::kUnknown;
    if (!offer.live_step || !peer_lost || attempt >= kRejoinAttempts) return session.status();
    PSYNC_LOG(WARNING) << "rejoining failed (" << session.status().message()
                       << "); joining the next generation (attempt " << attempt + 1 << " of " << kRejoinAttempts
                       << ")";
    offer.generation = 0;  // whichever forms next
  }
}

int64_t JobSession::RejoinGeneration(int code, int zero_stage, bool zero_replicas) const {
  if (code != kExitPeerLost && code != kExitRendezvous) return 0;
  (void)s_->mailbox->WaitForFailure(std::chrono::seconds(3));
  std::optional<IterationPlan> abort = s_->mailbox->abort_plan();
  if (!abort || abort->rejoin_generation <= generation()) return 0;
  if (zero_stage > 0 && !zero_replicas) {
    PSYNC_LOG(WARNING) << "--zero=" << zero_stage << ": the lost rank's shard of the optimizer state is gone (no "
                       << "replica of it was kept), so this rank cannot rejoin in place; exiting to resume from the "
                       << "newest checkpoint";
    return 0;
  }
  if (s_->device.is_cuda()) {
    PSYNC_LOG(WARNING) << "live recovery heals over host tensors, which a CUDA job's NCCL group cannot send yet; "
                       << "exiting to resume from the newest checkpoint";
    return 0;
  }
  return abort->rejoin_generation;
}

absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> JobSession::MakeDdp(std::shared_ptr<nn::Module> module,
                                                                                  ddp::DdpOptions options) const {
  options.rebuild = ddp::RebuildMode::kExternal;
  auto source = std::make_shared<CoordinatorUnusedSource>(s_->mailbox);
  absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> made =
      ddp::DistributedDataParallel::Create(std::move(module), s_->group, options, source);
  if (!made.ok()) {
    // Parameters are broadcast from rank 0 here: a rendezvous failure, unless
    // the job failed meanwhile (an ABORT, the coordinator lost).
    return WithExitCode(absl::Status(made.status().code(), absl::StrCat("setting up DDP: ", made.status().message())),
                        ExitCodeOf(s_->mailbox->failure(), kExitRendezvous));
  }
  if (!initial_bucket_plan().empty()) {
    if (absl::Status st = (*made)->reducer().ApplyBucketPlan(initial_bucket_plan()); !st.ok()) {
      return WithExitCode(absl::Status(st.code(), absl::StrCat("initial bucket plan: ", st.message())), kExitInternal);
    }
  }
  return made;
}

void JobSession::Finish(int code, const std::string& reason) {
  if (s_->finished) return;
  s_->finished = true;
  s_->watchdog->Stop();
  s_->client->SendDone(reason, code).IgnoreError();
  s_->client->Close();
}

void JobSession::Leave() {
  if (s_->finished) return;
  s_->finished = true;
  s_->watchdog->Stop();
  s_->client->Close();
}

int JobSession::rank() const { return s_->joined.rank; }
int JobSession::world_size() const { return s_->joined.world_size; }
int64_t JobSession::generation() const { return s_->joined.generation; }
int64_t JobSession::start_iteration() const { return s_->joined.start_iteration; }
int JobSession::heal_source() const { return s_->joined.heal_source; }
bool JobSession::live_recovery() const { return s_->joined.live_recovery; }
int JobSession::replica_distance() const { return comm::CrossHostDistance(s_->topology); }
int JobSession::plan_lookahead() const { return s_->joined.plan_lookahead; }
const std::string& JobSession::backend() const { return s_->choice.backend; }
const std::string& JobSession::backend_reason() const { return s_->choice.reason; }
const ddp::BucketPlan& JobSession::initial_bucket_plan() const { return s_->joined.initial_bucket_plan; }
std::shared_ptr<comm::ProcessGroup> JobSession::group() const { return s_->group; }
std::shared_ptr<PlanMailbox> JobSession::mailbox() const { return s_->mailbox; }
ReportChannel* JobSession::reports() const { return s_->reports.get(); }

}  // namespace psync::control
