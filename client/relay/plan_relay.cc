#include "client/relay/plan_relay.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_client.h"
#include "common/timer_queue.h"
#include "common/token_gate.h"
#include "psync/v1/coordinator.grpc.pb.h"
#include "client/relay/host_batcher.h"
#include "client/relay/local_stream.h"
#include "client/relay/upstream_stream.h"

namespace psync::relay {

struct PlanRelay::Impl : RankRegistry {
  RelayOptions opt;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  RelayCounters counters;
  std::shared_ptr<TokenGate> gate;  // null without a token
  TimerQueue timers;  // every batcher's deadlines: one thread for the relay

  std::mutex mu;  // guards groups, shut_down
  std::vector<std::shared_ptr<UpstreamStream>> groups;
  bool shut_down = false;

  // Puts a local rank into the forming batcher of its generation (or a new one).
  absl::StatusOr<std::shared_ptr<HostBatcher>> Register(const v1::Hello& h, std::shared_ptr<LocalSink> sink) override {
    std::lock_guard<std::mutex> l(mu);
    if (shut_down) return absl::UnavailableError("psync-relay is shutting down");
    // Reap ended groups (their threads have finished or are finishing).
    for (auto it = groups.begin(); it != groups.end();) {
      if ((*it)->batcher()->ended()) {
        (*it)->Join();
        it = groups.erase(it);
      } else {
        ++it;
      }
    }
    int carried = 0;
    for (auto& g : groups) {
      if (g->generation() != h.generation()) continue;
      if (g->batcher()->HasRank(h.rank())) {
        return absl::AlreadyExistsError(
            absl::StrCat("rank ", h.rank(), " already has a Train stream through this relay (generation ",
                         h.generation(), ")"));
      }
      carried += g->batcher()->size();
    }
    for (auto& g : groups) {
      if (g->generation() == h.generation() && g->job_id() == h.job_id() && g->batcher()->Add(h.rank(), sink)) {
        return g->batcher();
      }
    }
    // Why a new group: none of this generation is forming (the first local
    // Hello, or one that came after its group had opened).
    BatcherOptions bo;
    bo.expect_ranks = opt.expect_ranks > 0 ? std::max(1, opt.expect_ranks - carried) : 0;
    bo.form_wait = opt.form_wait;
    bo.max_hold = opt.max_hold;
    const UpstreamTarget target{stub.get(), opt.upstream, opt.token, &counters};
    auto g = std::make_shared<UpstreamStream>(target, h.job_id(), h.generation(), HostBatcher::Create(bo, &timers));
    g->batcher()->Add(h.rank(), std::move(sink));
    g->Start();
    groups.push_back(g);
    return g->batcher();
  }

  void Shutdown() {
    std::vector<std::shared_ptr<UpstreamStream>> gs;
    {
      std::lock_guard<std::mutex> l(mu);
      if (shut_down) return;
      shut_down = true;
      gs = groups;
    }
    for (auto& g : gs) g->Cancel();
    for (auto& g : gs) g->Join();
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    {
      std::lock_guard<std::mutex> l(mu);
      groups.clear();
    }
    timers.Stop();
  }
};

namespace {

// Train raw (local_stream.h); the other methods answer UNIMPLEMENTED
// through the callback API, so the server needs no synchronous threads.
using RelayServiceBase = v1::Coordinator::WithCallbackMethod_Join<v1::Coordinator::WithCallbackMethod_StoreSet<
    v1::Coordinator::WithCallbackMethod_StoreGet<v1::Coordinator::WithRawCallbackMethod_Train<v1::Coordinator::Service>>>>;

class RelayService final : public RelayServiceBase {
 public:
  explicit RelayService(PlanRelay::Impl* relay) : relay_(relay) {}
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Train(grpc::CallbackServerContext*) override {
    return new LocalStream(relay_);
  }
  // Join, StoreSet and StoreGet stay UNIMPLEMENTED: workers send them to the coordinator.

 private:
  PlanRelay::Impl* relay_;
};

}  // namespace

PlanRelay::PlanRelay(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PlanRelay::~PlanRelay() { Shutdown(); }

int PlanRelay::port() const { return impl_->port; }

RelayStats PlanRelay::stats() const { return impl_->counters.Get(); }

void PlanRelay::Shutdown() {
  if (impl_) impl_->Shutdown();
}

absl::StatusOr<std::unique_ptr<PlanRelay>> PlanRelay::Start(const RelayOptions& opt) {
  auto impl = std::make_unique<Impl>();
  impl->opt = opt;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = ClientCredentials(opt.tls_ca);
  if (!creds.ok()) return creds.status();
  // As the worker's client: notice a dead connection within ~5 s.
  impl->channel = grpc::CreateCustomChannel(opt.upstream, *creds, KeepaliveChannelArgs());
  impl->stub = v1::Coordinator::NewStub(impl->channel);
  impl->service = std::make_unique<RelayService>(impl.get());
  grpc::ServerBuilder b;
  std::shared_ptr<grpc::ServerCredentials> server_creds = grpc::InsecureServerCredentials();
  if (!opt.token.empty()) {
    // Why a gate: a local caller without the job's token is refused before
    // its message is read (common/token_gate.h), as at the coordinator.
    TokenGateOptions g;
    g.token = opt.token;
    g.server_name = "psync-relay";
    g.missing_message = "psync-relay: missing token (the job's PSYNC_TOKEN is required)";
    g.wrong_message = "psync-relay: invalid token (the job's PSYNC_TOKEN is required)";
    impl->gate = std::make_shared<TokenGate>(
        std::move(g), std::make_shared<RefusalCounters>(std::vector<std::string>{"/psync.v1.Coordinator/Train"}));
    server_creds = GatedServerCredentials(impl->gate);
  }
  b.AddListeningPort(absl::StrCat(opt.listen_host, ":", opt.port), server_creds, &impl->port);
  b.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);  // as the coordinator (coordinator_server.cc)
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is refused, as at the coordinator
  b.RegisterService(impl->service.get());
  b.SetMaxReceiveMessageSize(16 << 20);
  impl->server = b.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return absl::UnavailableError(absl::StrCat("psync-relay cannot listen on ", opt.listen_host, ":", opt.port));
  }
  return std::unique_ptr<PlanRelay>(new PlanRelay(std::move(impl)));
}

}  // namespace psync::relay
