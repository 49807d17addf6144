#include "server/coordinator_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "server/auth.h"
#include "server/control_service.h"
#include "server/coordinator_service.h"
#include "server/kv_store.h"
#include "server/limits.h"
#include "server/listen_policy.h"
#include "server/liveness.h"
#include "server/job_metrics.h"
#include "server/plan_fanout.h"
#include "common/metrics_http_server.h"
#include "common/timer_queue.h"
#include "psync/common/logging.h"
#include "server/job_journal.h"
#include "server/journal.h"
#include "server/journal_writer.h"

namespace psync::server {
namespace {

// Plan fan-out (plan_fanout.h): one helper thread next to the thread that
// completed the iteration, for broadcasts to 32 ranks or more. Measured on
// the 2-core VM (bench/README.md): 1, 2 and 3 helpers were within noise of
// each other, all better than none at 512 workers; below 32 ranks the
// fan-out is short and stays on one thread.
constexpr int kPlanFanOutHelpers = 1;
constexpr size_t kPlanFanOutMinSinks = 32;

// The journal (--state-dir) is written soon after every event, and at
// least this often while only the /metrics counters move.
constexpr std::chrono::milliseconds kJournalPeriod{1000};

// Linking grpc++_reflection registers its plugin for every server (a static
// initializer); this option takes it out again unless reflection was asked for.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                    return p->name() == "proto_server_reflection";
                                  }),
                   plugins->end());
  }
};

// Without a token: TLS with the PEM pair when given, else plaintext.
std::shared_ptr<grpc::ServerCredentials> UngatedCredentials(const ServerOptions& options) {
  if (options.tls_cert_pem.empty() && options.tls_key_pem.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
  return grpc::SslServerCredentials(ssl);
}

// What one caller can cost (server/README.md, "What a call can cost"):
// refused calls never get a read posted (the gate), and without BDP probing
// each stream's receive window stays at HTTP/2's 64 KiB, so a refused
// stream's data in flight is bounded too (with probing on, 32 refused
// 15 MiB calls still took the peak RSS from 17 to 120 MB; without, to
// 22 MB). Our messages are small or rare (a Join manifest of a few MB is
// read once per rank), so the bigger windows buy nothing.
void BoundCallCost(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreamsPerConnection);
  builder->AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, kMaxReadChunkBytes);
  grpc::ResourceQuota quota("psync-coordinator");
  quota.Resize(kGrpcMemoryQuotaBytes);
  builder->SetResourceQuota(quota);
}

// GET /metrics (job_metrics.h): a snapshot under JobState's lock, rendered
// on the HTTP server's own thread, so no HTTP client ever waits on (or
// holds up) a gRPC thread.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetrics(const ServerOptions& options, const JobState* job,
                                                                 const RefusalCounters* refusals) {
  MetricsHttpServer::Options mo;
  mo.host = options.metrics_host;
  mo.port = options.metrics_port;
  return MetricsHttpServer::Start(mo, [job, refusals] {
    JobMetrics m;
    job->FillMetrics(&m);
    return RenderJobMetrics(m, refusals);
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(ServerOptions options) {
  if (options.job.world_size < 1 || options.job.world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", options.job.world_size,
                                                   " is out of range 1..", kMaxWorldSize));
  }
  if (options.job.max_restarts < 0 || options.job.max_restarts > kMaxRestarts) {
    return absl::InvalidArgumentError(absl::StrCat("max restarts ", options.job.max_restarts,
                                                   " is out of range 0..", kMaxRestarts));
  }
  if (options.job.plan_lookahead < 1 || options.job.plan_lookahead > kMaxPlanLookahead) {
    return absl::InvalidArgumentError(absl::StrCat("plan lookahead ", options.job.plan_lookahead,
                                                   " is out of range 1..", kMaxPlanLookahead));
  }
  if (absl::Status st = CheckListenPolicy(options.host, options.token, options.allow_unauthenticated); !st.ok()) {
    return st;
  }
  std::unique_ptr<Journal> journal;
  if (!options.state_dir.empty()) {
    const int64_t now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    PSYNC_ASSIGN_OR_RETURN(journal, Journal::Open(options.state_dir, options.job, now_ms));
    options.job.epoch = journal->epoch();
  }
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->options_ = options;
  s->timers_ = std::make_unique<TimerQueue>();
  s->fanout_ = std::make_unique<PlanFanOut>(kPlanFanOutHelpers, kPlanFanOutMinSinks);
  s->job_ = std::make_unique<JobState>(options.job, s->timers_.get(), s->fanout_.get());
  if (journal) PSYNC_RETURN_IF_ERROR(s->StartJournal(std::move(journal)));
  s->kv_ = std::make_unique<KvStore>(s->timers_.get());
  // Why: a generation's bootstrap keys are useless once it ended; dropping
  // them keeps restarts from filling the store (kMaxKeysPerJob).
  s->job_->SetGenerationEndHook([kv = s->kv_.get()](const std::string& prefix) { kv->ErasePrefix(prefix); });
  s->coordinator_ = std::make_unique<CoordinatorService>(s->job_.get(), s->kv_.get());
  // Why flush before answering a Shutdown: a coordinator killed right
  // after psyncctl heard "stopping" must not forget it (job_journal.h).
  s->control_ = std::make_unique<ControlService>(s->job_.get(), [w = s->journal_.get()] {
    if (w != nullptr) (void)w->Flush();
  });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();  // registered; used only with options.reflection
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!options.token.empty()) {
    s->refusals_ = std::make_shared<RefusalCounters>(CoordinatorMethods());
    s->gate_ = MakeCoordinatorGate(options.token, s->refusals_);
    creds = GatedServerCredentials(s->gate_, options.tls_cert_pem, options.tls_key_pem);
  } else {
    creds = UngatedCredentials(options);
  }
  if (options.metrics_port >= 0) {
    PSYNC_ASSIGN_OR_RETURN(s->metrics_, StartMetrics(options, s->job_.get(), s->refusals_.get()));
  }
  if (absl::Status st = s->Listen(creds); !st.ok()) {
    s->journal_.reset();  // before Shutdown's abort: a start that failed ends no job
    s->timers_->Stop();
    return st;
  }
  if (auto* health = s->server_->GetHealthCheckService()) {
    health->SetServingStatus("", true);
    health->SetServingStatus("psync.v1.Coordinator", true);
    health->SetServingStatus("psync.v1.Control", true);
  }
  // Check often enough that a silent rank is found within ~1.25 x heartbeat_timeout.
  const auto period = std::clamp(std::min(options.liveness_period, s->job_->config().heartbeat_timeout / 4),
                                 std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  s->liveness_ = std::make_unique<LivenessTicker>(s->job_.get(), s->timers_.get(), period);
  return s;
}

absl::Status CoordinatorServer::BuildAndStart(const std::shared_ptr<grpc::ServerCredentials>& creds) {
  grpc::ServerBuilder builder;
  if (!options_.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  const std::string addr = absl::StrCat(options_.host, ":", options_.port);
  builder.AddListeningPort(addr, creds, &port_);
  // Why no SO_REUSEPORT (gRPC's default on Linux): a second coordinator on a
  // port in use would start without an error and take half the workers.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  BoundCallCost(&builder);
  // Keepalive: ping every client every 10 s (even with no RPC in flight) and
  // drop the connection when a ping is not acknowledged within 5 s, so a
  // worker whose link died without a TCP reset has its stream closed. Accept
  // the workers' own keepalive pings (every 2 s, see CoordinatorClient)
  // without counting them as abuse.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.RegisterService(coordinator_.get());
  builder.RegisterService(control_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", addr,
                                               " (port in use, or bad address / TLS key)"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorServer::Listen(const std::shared_ptr<grpc::ServerCredentials>& creds) {
  // Why wait: with a state dir, the coordinator that holds the port may be
  // the one this start replaces (paused, or cut off); it lets go of it as
  // soon as it runs and sees the newer journal (JobResume::Fenced). Why
  // probe instead of building again: a gRPC service registers with one
  // server only, even one that failed to start.
  const auto deadline = std::chrono::steady_clock::now() + options_.bind_wait;
  if (options_.bind_wait.count() > 0 && PortInUse(options_.host, options_.port)) {
    PSYNC_LOG(WARNING) << "port " << options_.port << " is in use; trying again for up to "
                       << options_.bind_wait.count() / 1000
                       << " s (the coordinator this one replaces may still hold it)";
    while (PortInUse(options_.host, options_.port) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return BuildAndStart(creds);
}

absl::Status CoordinatorServer::StartJournal(std::unique_ptr<Journal> journal) {
  if (const std::optional<v1::JournalState>& prev = journal->previous()) {
    JobJournal::Restore(*job_, *prev, journal->dir());
  }
  Journal* j = journal.get();
  JobJournal::SetLeaseCheck(*job_, [j] { return j->NewerEpoch(); });
  // Why write before serving: this file is the lease (journal.h); the
  // coordinator this one replaces stops once it sees it.
  PSYNC_RETURN_IF_ERROR(j->Write(JobJournal::Snapshot(*job_)));
  journal_ = std::make_unique<JournalWriter>(job_.get(), std::move(journal), kJournalPeriod);
  return absl::OkStatus();
}

int CoordinatorServer::metrics_port() const { return metrics_ ? metrics_->port() : -1; }

void CoordinatorServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (metrics_) metrics_->Stop();
  // Why the checks: a Start that failed half-way (a port in use) ends here too.
  if (liveness_) liveness_->Stop();
  if (auto* health = server_ ? server_->GetHealthCheckService() : nullptr) health->Shutdown();
  job_->Abort("coordinator shutting down");  // ends streams, answers waiting Joins
  kv_->Close();                              // answers waiting StoreGets
  job_->events().Close();                    // ends Watches
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
  if (journal_) journal_->Stop();  // the job's end on disk, after the last RPC changed it
  timers_->Stop();  // after the last RPC: nothing can schedule any more
  fanout_->Stop();  // likewise, nothing can broadcast any more
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

}  // namespace psync::server
