#include "worker/runtime/job_session.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/used_bitmap.h"
#include "worker/comm/backend_choice.h"
#include "worker/comm/process_group_factory.h"
#include "worker/comm/topology.h"
#include "worker/runtime/coordinator/coordinator_client.h"
#include "worker/runtime/coordinator/coordinator_store.h"
#include "worker/runtime/exit_codes.h"
#include "worker/runtime/gloo_host.h"
#include "worker/runtime/host_identity.h"
#include "worker/runtime/plan_pump.h"

namespace psync::runtime {

namespace coord = ::psync::coordinator;

namespace {

class ClientReports : public ReportChannel {
 public:
  explicit ClientReports(coord::CoordinatorClient* client) : client_(client) {}
  absl::Status SendReport(int64_t iteration, const std::vector<uint8_t>& used, double loss, double last_step_ms,
                          const std::vector<size_t>& ready_order, double tokens_per_s) override {
    coord::Report r;
    r.iteration = iteration;
    r.used_bitmap = bitmap::Pack(used);
    r.loss = std::isfinite(loss) ? loss : 0.0;
    r.last_step_ms = last_step_ms;
    r.tokens_per_s = std::isfinite(tokens_per_s) && tokens_per_s >= 0 ? tokens_per_s : 0.0;
    for (size_t i : ready_order) r.ready_order.push_back(static_cast<int>(i));
    return client_->SendReport(r);
  }

 private:
  coord::CoordinatorClient* client_;
};

absl::Status Rendezvous(const std::string& what, const absl::Status& st) {
  return WithExitCode(absl::Status(st.code(), absl::StrCat(what, ": ", st.message())), kExitRendezvous);
}

}  // namespace

// Destruction order matters: the pump reads the client and aborts the group,
// so it goes first (declared last).
struct JobSession::State {
  std::unique_ptr<coord::CoordinatorClient> client;
  coord::JoinResult joined;
  comm::BackendChoice choice;
  ddp::BucketPlan initial_plan;
  std::shared_ptr<comm::ProcessGroup> group;
  std::shared_ptr<PlanMailbox> mailbox;
  std::unique_ptr<ClientReports> reports;
  std::unique_ptr<PlanPump> pump;
  bool finished = false;
};

JobSession::JobSession(std::unique_ptr<State> state) : s_(std::move(state)) {}

JobSession::~JobSession() { Finish(kExitInternal, "worker ended without a reason"); }

absl::StatusOr<std::unique_ptr<JobSession>> JobSession::Start(
    const WorkerOptions& opt, Device device, const std::vector<std::pair<std::string, autograd::Variable>>& params,
    int64_t start_iteration) {
  auto s = std::make_unique<State>();
  absl::StatusOr<std::unique_ptr<coord::CoordinatorClient>> client =
      coord::CoordinatorClient::Connect(opt.coordinator, opt.token, opt.timeout, opt.tls_ca);
  if (!client.ok()) return Rendezvous(absl::StrCat("cannot reach the coordinator at ", opt.coordinator), client.status());
  s->client = std::move(*client);

  absl::StatusOr<std::string> host_id = LocalHostId();
  if (!host_id.ok()) return WithExitCode(host_id.status(), kExitBadInput);
  coord::JoinRequest req;
  req.job_id = opt.job_id;
  req.host_id = *host_id;
  req.requested_rank = opt.rank;
  req.world_size = opt.world_size;
  req.device = device.ToString();
  req.backend = opt.backend;  // as requested: every rank must ask for the same
  // A resumed run starts at its checkpoint's step; the coordinator checks
  // that every rank agrees and starts this generation's plans there.
  req.start_iteration = start_iteration;
  for (const auto& [name, p] : params) {
    req.manifest.push_back({name, p.shape(), static_cast<int>(p.data().element_size())});
  }
  req.bucket_cap_bytes = static_cast<int64_t>(opt.bucket_cap_mb * 1024 * 1024);
  req.first_bucket_cap_bytes = static_cast<int64_t>(opt.first_bucket_mb * 1024 * 1024);
  absl::StatusOr<coord::JoinResult> joined = s->client->Join(req, std::chrono::hours(1));
  if (!joined.ok()) return Rendezvous("rendezvous failed", joined.status());
  s->joined = std::move(*joined);
  SetLogRank(s->joined.rank);
  s->initial_plan = ToDdpPlan(s->joined.initial_bucket_plan);

  // Which ranks share a host: the coordinator collected every rank's host id
  // at Join (PSYNC_HOST_ID, else hostname + boot id + mount namespace).
  absl::StatusOr<comm::Topology> topology = comm::Topology::FromHostIds(s->joined.host_ids);
  if (!topology.ok()) return Rendezvous("host layout", topology.status());
  if (opt.local_world_size > 0) {
    const int local = topology->local_size(s->joined.rank);
    if (local != opt.local_world_size) {
      PSYNC_LOG(WARNING) << "LOCAL_WORLD_SIZE=" << opt.local_world_size << " but " << local
                         << " ranks share this host by the coordinator's host ids; using the host ids";
    }
  }
  absl::StatusOr<comm::BackendChoice> choice =
      comm::ChooseBackend(opt.backend, *topology, s->joined.world_size, device.is_cuda());
  if (!choice.ok()) return WithExitCode(choice.status(), kExitBadInput);
  s->choice = *choice;

  auto store = std::make_shared<coord::CoordinatorStore>(s->client.get(), s->joined.store_prefix);
  comm::GroupOptions gopt;
  gopt.timeout = opt.timeout;
  gopt.prefix = "pg0";
  gopt.device = device.is_cuda() ? device.index : -1;
  gopt.topology = *topology;
  gopt.job_tag = absl::StrCat(opt.job_id, ".g", s->joined.generation);
  if (!opt.gloo_host.empty()) {
    gopt.hostname = opt.gloo_host;
  } else {
    absl::StatusOr<std::string> host = DeriveGlooHost(opt.coordinator);
    if (!host.ok()) return Rendezvous("Gloo address", host.status());
    gopt.hostname = *host;
  }
  absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> pg =
      comm::CreateProcessGroup(s->choice.backend, store, s->joined.rank, s->joined.world_size, gopt);
  if (!pg.ok()) return Rendezvous(absl::StrCat("creating the ", s->choice.backend, " process group"), pg.status());
  s->group = std::move(*pg);
  if (!opt.plan_relay.empty()) {
    // Why: the host's relay carries this rank's Train stream to the
    // coordinator together with the host's other ranks (client/relay/README.md).
    if (absl::Status st = s->client->UseTrainRelay(opt.plan_relay, opt.timeout); !st.ok()) {
      return Rendezvous("reaching the plan relay", st);
    }
  }
  if (absl::Status st = s->client->OpenTrainStream(s->joined.rank, s->joined.generation); !st.ok()) {
    return Rendezvous("opening the train stream", st);
  }
  s->mailbox = std::make_shared<PlanMailbox>();
  s->reports = std::make_unique<ClientReports>(s->client.get());
  s->pump = std::make_unique<PlanPump>(s->client.get(), s->mailbox, s->group, params.size());
  return std::unique_ptr<JobSession>(new JobSession(std::move(s)));
}

void JobSession::Finish(int code, const std::string& reason) {
  if (s_->finished) return;
  s_->finished = true;
  s_->pump->Stop();
  s_->client->SendDone(reason, code).IgnoreError();
  s_->client->Close();
}

int JobSession::rank() const { return s_->joined.rank; }
int JobSession::world_size() const { return s_->joined.world_size; }
int64_t JobSession::generation() const { return s_->joined.generation; }
int JobSession::plan_lookahead() const { return s_->joined.plan_lookahead; }
const std::string& JobSession::backend() const { return s_->choice.backend; }
const std::string& JobSession::backend_reason() const { return s_->choice.reason; }
const ddp::BucketPlan& JobSession::initial_bucket_plan() const { return s_->initial_plan; }
std::shared_ptr<comm::ProcessGroup> JobSession::group() const { return s_->group; }
std::shared_ptr<PlanMailbox> JobSession::mailbox() const { return s_->mailbox; }
ReportChannel* JobSession::reports() const { return s_->reports.get(); }
const std::atomic<int>* JobSession::fatal_code() const { return s_->pump->fatal_code(); }

}  // namespace psync::runtime
