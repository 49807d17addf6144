#include "client/relay/plan_relay.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_client.h"
#include "common/logging.h"
#include "common/token.h"
#include "psync/v1/coordinator.grpc.pb.h"

namespace psync::relay {
// Not in an anonymous namespace: PlanRelay::Impl (declared in the header)
// holds Groups.
namespace internal {

using Clock = std::chrono::steady_clock;
using PlanPtr = std::shared_ptr<const v1::Plan>;

// The write side of one local worker's stream: a queue of plans written one
// at a time, and the end of the stream (Finish) once the queue is drained.
// Shared by the stream's reactor and its Group; guarded by mu_.
class LocalWriter {
 public:
  explicit LocalWriter(grpc::ServerBidiReactor<v1::TrainUp, v1::Plan>* r) : r_(r) {}

  void Push(PlanPtr p) {
    std::lock_guard<std::mutex> l(mu_);
    if (end_ || failed_) return;
    q_.push_back(std::move(p));
    StartNextLocked();
  }
  // Ends the stream with `st` after what is queued (the first End wins).
  void End(grpc::Status st) {
    std::lock_guard<std::mutex> l(mu_);
    if (end_) return;
    end_ = true;
    st_ = std::move(st);
    StartNextLocked();
  }
  void WriteDone(bool ok) {
    std::lock_guard<std::mutex> l(mu_);
    writing_ = false;
    if (!q_.empty()) q_.pop_front();
    if (!ok) {
      failed_ = true;  // why: the worker is gone; nothing more can be written
      q_.clear();
    }
    StartNextLocked();
  }
  void Detach() {
    std::lock_guard<std::mutex> l(mu_);
    r_ = nullptr;
  }

 private:
  void StartNextLocked() {
    if (r_ == nullptr || writing_ || finished_) return;
    if (!q_.empty() && !failed_) {
      writing_ = true;
      r_->StartWrite(q_.front().get());
      return;
    }
    if (end_) {
      finished_ = true;
      r_->Finish(st_);
    }
  }

  std::mutex mu_;
  grpc::ServerBidiReactor<v1::TrainUp, v1::Plan>* r_;
  std::deque<PlanPtr> q_;  // front() is being written while writing_
  bool writing_ = false, end_ = false, failed_ = false, finished_ = false;
  grpc::Status st_;
};

// One upstream host stream and the local streams it carries (see the header).
class Group {
 public:
  Group(PlanRelay::Impl* relay, int64_t generation, std::string job_id, int expect, Clock::time_point deadline)
      : relay_(relay), generation_(generation), job_id_(std::move(job_id)), expect_(expect), deadline_(deadline) {}

  int64_t generation() const { return generation_; }
  const std::string& job_id() const { return job_id_; }

  // Adds a local rank while the group forms; false once it has opened.
  bool TryAdd(int rank, std::shared_ptr<LocalWriter> w) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (phase_ != Phase::kForming || cancel_) return false;
      members_[rank] = Member{std::move(w), true};
    }
    cv_.notify_all();
    return true;
  }
  bool HasRank(int rank) {
    std::lock_guard<std::mutex> l(mu_);
    return phase_ != Phase::kEnded && members_.count(rank) > 0;
  }
  int size() {
    std::lock_guard<std::mutex> l(mu_);
    return phase_ == Phase::kEnded ? 0 : static_cast<int>(members_.size());
  }
  bool ended() {
    std::lock_guard<std::mutex> l(mu_);
    return phase_ == Phase::kEnded;
  }

  void Report(int rank, v1::Report r) {
    {
      std::lock_guard<std::mutex> l(mu_);
      r.set_rank(rank);
      auto [it, fresh] = held_.try_emplace(r.iteration());
      if (fresh) it->second.first = Clock::now();
      it->second.second[rank] = std::move(r);
    }
    cv_.notify_all();
  }
  void Heartbeat(const v1::Heartbeat& hb) {
    {
      std::lock_guard<std::mutex> l(mu_);
      Out o;
      *o.up.mutable_heartbeat() = hb;
      out_.push_back(std::move(o));
    }
    cv_.notify_all();
  }
  // The rank's Done goes up after its held reports; its local stream ends
  // once the Done is written.
  void Done(int rank, v1::Done d) {
    {
      std::lock_guard<std::mutex> l(mu_);
      FlushHeldLocked(Clock::now(), /*force=*/true);
      d.set_rank(rank);
      Out o;
      *o.up.mutable_done() = std::move(d);
      o.end_rank = rank;
      out_.push_back(std::move(o));
      if (auto it = members_.find(rank); it != members_.end()) it->second.live = false;
    }
    cv_.notify_all();
  }
  // The rank's local stream ended without Done (or broke the protocol).
  void Gone(int rank, const std::string& cause) {
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = members_.find(rank);
      if (it == members_.end() || !it->second.live) return;
      it->second.live = false;
      it->second.w.reset();
      if (phase_ == Phase::kForming) {
        // Why: not announced upstream yet; the coordinator blames the rank
        // for never attaching, as it would without the relay.
        members_.erase(it);
        return;
      }
      // Why not after an ABORT of every rank: the generation is over and
      // the coordinator expects nothing more of it.
      if (all_aborted_ || phase_ == Phase::kEnded) return;
      FlushHeldLocked(Clock::now(), /*force=*/true);
      Out o;
      o.up.mutable_rank_closed()->set_rank(rank);
      o.up.mutable_rank_closed()->set_cause(cause);
      out_.push_back(std::move(o));
    }
    cv_.notify_all();
  }

  void Start() {
    sender_ = std::thread([this] { RunSender(); });
  }
  void Cancel() {
    {
      std::lock_guard<std::mutex> l(mu_);
      cancel_ = true;
      if (ctx_) ctx_->TryCancel();
    }
    cv_.notify_all();
  }
  void Join() {
    if (sender_.joinable()) sender_.join();
    if (reader_.joinable()) reader_.join();
  }

 private:
  enum class Phase { kForming, kOpen, kEnded };
  struct Member {
    std::shared_ptr<LocalWriter> w;
    bool live = true;  // not done, not gone: its reports are waited for
  };
  struct Out {
    v1::TrainUp up;
    int end_rank = -1;  // after writing: end this rank's local stream (its Done)
  };

  // Moves due held reports into out_, oldest iteration first (see the
  // header's hold rule); `force`: all of them.
  void FlushHeldLocked(Clock::time_point now, bool force);
  Clock::time_point NextDueLocked() const;
  void RunSender();
  void RunReader();
  void EndLocked(const grpc::Status& st);

  PlanRelay::Impl* const relay_;
  const int64_t generation_;
  const std::string job_id_;
  const int expect_;
  const Clock::time_point deadline_;  // forming ends here at the latest

  std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::kForming;
  std::map<int, Member> members_;  // by rank
  std::deque<Out> out_;
  std::map<int64_t, std::pair<Clock::time_point, std::map<int, v1::Report>>> held_;  // iteration -> (first, reports)
  bool all_aborted_ = false;   // an ABORT for every rank came down
  bool reading_ended_ = false;
  bool sender_done_ = false;
  bool cancel_ = false;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::TrainUp, v1::Plan>> stream_;
  std::thread sender_, reader_;
};

}  // namespace internal

using internal::Clock;
using internal::Group;
using internal::LocalWriter;
using internal::PlanPtr;

struct PlanRelay::Impl {
  RelayOptions opt;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  std::unique_ptr<v1::Coordinator::CallbackService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  mutable std::mutex stats_mu;
  RelayStats stats;

  std::mutex mu;  // guards groups, shut_down
  std::vector<std::shared_ptr<Group>> groups;
  bool shut_down = false;

  void Count(const std::function<void(RelayStats&)>& f) {
    std::lock_guard<std::mutex> l(stats_mu);
    f(stats);
  }

  bool Authorized(grpc::CallbackServerContext* ctx, grpc::Status* st) const {
    if (opt.token.empty()) return true;
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    const absl::string_view value =
        it == md.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size());
    if (!BearerTokenMatches(value, opt.token)) {
      *st = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                         "psync-relay: missing or invalid token (the job's PSYNC_TOKEN is required)");
      return false;
    }
    return true;
  }

  // Puts a local rank into the forming group of its generation (or a new one).
  absl::StatusOr<std::shared_ptr<Group>> Register(const v1::Hello& h, std::shared_ptr<LocalWriter> w) {
    std::lock_guard<std::mutex> l(mu);
    if (shut_down) return absl::UnavailableError("psync-relay is shutting down");
    // Reap ended groups (their threads have finished or are finishing).
    for (auto it = groups.begin(); it != groups.end();) {
      if ((*it)->ended()) {
        (*it)->Join();
        it = groups.erase(it);
      } else {
        ++it;
      }
    }
    int carried = 0;
    for (auto& g : groups) {
      if (g->generation() != h.generation()) continue;
      if (g->HasRank(h.rank())) {
        return absl::AlreadyExistsError(
            absl::StrCat("rank ", h.rank(), " already has a Train stream through this relay (generation ",
                         h.generation(), ")"));
      }
      carried += g->size();
    }
    for (auto& g : groups) {
      if (g->generation() == h.generation() && g->job_id() == h.job_id() && g->TryAdd(h.rank(), w)) return g;
    }
    // Why a new group: none of this generation is forming (the first local
    // Hello, or one that came after its group had opened).
    const int expect = opt.expect_ranks > 0 ? std::max(1, opt.expect_ranks - carried) : 0;
    auto g = std::make_shared<Group>(this, h.generation(), h.job_id(), expect, Clock::now() + opt.form_wait);
    g->TryAdd(h.rank(), std::move(w));
    g->Start();
    groups.push_back(g);
    return g;
  }

  void Shutdown() {
    std::vector<std::shared_ptr<Group>> gs;
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
  }
};

namespace {

// One local worker's Train stream (a single-rank stream, as at the coordinator).
class LocalStream final : public grpc::ServerBidiReactor<v1::TrainUp, v1::Plan> {
 public:
  LocalStream(grpc::CallbackServerContext* ctx, PlanRelay::Impl* relay)
      : relay_(relay), writer_(std::make_shared<LocalWriter>(this)) {
    grpc::Status st;
    if (!relay_->Authorized(ctx, &st)) {
      writer_->End(st);
      return;
    }
    StartRead(&up_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // Why: the worker went away (or half-closed) without Done; the
      // coordinator must hear that this rank is lost, as without the relay.
      if (group_ && !done_) group_->Gone(rank_, "stream closed (relayed by psync-relay)");
      writer_->End(grpc::Status::OK);
      return;
    }
    if (!group_) {
      if (!up_.has_hello() || up_.hello().ranks_size() > 0 || up_.hello().rank() < 0) {
        writer_->End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                  "the first message on a Train stream through psync-relay must be "
                                  "hello{job_id, rank, generation} of one rank"));
        return;
      }
      absl::StatusOr<std::shared_ptr<Group>> g = relay_->Register(up_.hello(), writer_);
      if (!g.ok()) {
        writer_->End(grpc::Status(static_cast<grpc::StatusCode>(g.status().code()),
                                  std::string(g.status().message())));
        return;
      }
      group_ = *g;
      rank_ = up_.hello().rank();
      StartRead(&up_);
      return;
    }
    std::string bad;
    switch (up_.msg_case()) {
      case v1::TrainUp::kReport:
        group_->Report(rank_, up_.report());
        break;
      case v1::TrainUp::kHeartbeat:
        if (up_.heartbeat().rank() != rank_) {
          bad = absl::StrCat("heartbeat names rank ", up_.heartbeat().rank(), " on the Train stream of rank ", rank_);
        } else {
          group_->Heartbeat(up_.heartbeat());
        }
        break;
      case v1::TrainUp::kDone:
        done_ = true;
        group_->Done(rank_, up_.done());
        return;  // the group ends this stream once the Done is written upstream
      default:
        bad = "unexpected TrainUp message on a worker's Train stream (after hello: report, heartbeat or done)";
        break;
    }
    if (!bad.empty()) {
      // Why: a protocol violation loses the rank, as at the coordinator.
      group_->Gone(rank_, absl::StrCat("protocol error: ", bad));
      writer_->End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, bad));
      return;
    }
    StartRead(&up_);
  }
  void OnWriteDone(bool ok) override { writer_->WriteDone(ok); }
  void OnDone() override {
    writer_->Detach();
    delete this;
  }

 private:
  PlanRelay::Impl* const relay_;
  std::shared_ptr<LocalWriter> writer_;
  std::shared_ptr<Group> group_;  // set by the hello
  v1::TrainUp up_;
  int rank_ = -1;
  bool done_ = false;
};

class RelayService final : public v1::Coordinator::CallbackService {
 public:
  explicit RelayService(PlanRelay::Impl* relay) : relay_(relay) {}
  grpc::ServerBidiReactor<v1::TrainUp, v1::Plan>* Train(grpc::CallbackServerContext* ctx) override {
    return new LocalStream(ctx, relay_);
  }
  // Join, StoreSet and StoreGet stay UNIMPLEMENTED: workers send them to the coordinator.

 private:
  PlanRelay::Impl* relay_;
};

}  // namespace

namespace internal {

void Group::FlushHeldLocked(Clock::time_point now, bool force) {
  while (!held_.empty()) {
    auto it = held_.begin();
    bool complete = true;
    for (const auto& [rank, m] : members_) {
      if (m.live && it->second.second.count(rank) == 0) {
        complete = false;
        break;
      }
    }
    if (!complete && !force && now < it->second.first + relay_->opt.max_hold) break;
    Out o;
    for (auto& [rank, r] : it->second.second) *o.up.mutable_report_batch()->add_reports() = std::move(r);
    const int64_t n = o.up.report_batch().reports_size();
    relay_->Count([n](RelayStats& s) {
      ++s.report_batches;
      s.reports += n;
    });
    out_.push_back(std::move(o));
    held_.erase(it);
  }
}

Clock::time_point Group::NextDueLocked() const {
  if (held_.empty()) return Clock::time_point::max();
  return held_.begin()->second.first + relay_->opt.max_hold;
}

void Group::EndLocked(const grpc::Status& st) {
  phase_ = Phase::kEnded;
  for (auto& [rank, m] : members_) {
    if (m.w) m.w->End(st);
    m.w.reset();
    m.live = false;
  }
}

void Group::RunSender() {
  std::vector<int> ranks;
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_until(l, deadline_, [&] {
      return cancel_ || (expect_ > 0 && static_cast<int>(members_.size()) >= expect_);
    });
    if (cancel_ || members_.empty()) {
      EndLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "psync-relay is shutting down"));
      sender_done_ = true;
      return;
    }
    // Why now: every expected local rank said hello (or the wait is over);
    // the host stream carries exactly these ranks.
    phase_ = Phase::kOpen;
    for (const auto& [rank, m] : members_) ranks.push_back(rank);
    ctx_ = std::make_unique<grpc::ClientContext>();
    if (!relay_->opt.token.empty()) ctx_->AddMetadata("authorization", "Bearer " + relay_->opt.token);
  }
  relay_->Count([](RelayStats& s) { ++s.upstream_streams; });
  PSYNC_LOG(INFO) << "psync-relay: host stream for ranks " << absl::StrJoin(ranks, ",") << " (generation "
                  << generation_ << ") to " << relay_->opt.upstream;
  stream_ = relay_->stub->Train(ctx_.get());
  v1::TrainUp hello;
  hello.mutable_hello()->set_job_id(job_id_);
  hello.mutable_hello()->set_generation(generation_);
  for (int r : ranks) hello.mutable_hello()->add_ranks(r);
  bool ok = stream_->Write(hello);
  reader_ = std::thread([this] { RunReader(); });
  bool half_close = false;
  while (ok) {
    std::deque<Out> batch;
    {
      std::unique_lock<std::mutex> l(mu_);
      while (true) {
        FlushHeldLocked(Clock::now(), /*force=*/false);
        if (!out_.empty() || reading_ended_ || cancel_) break;
        const bool any_live =
            std::any_of(members_.begin(), members_.end(), [](const auto& m) { return m.second.live; });
        if (!any_live && held_.empty()) {
          half_close = true;
          break;
        }
        cv_.wait_until(l, NextDueLocked());
      }
      if (reading_ended_ || cancel_) break;
      batch.swap(out_);
    }
    for (Out& o : batch) {
      ok = stream_->Write(o.up);
      if (!ok) break;
      if (o.end_rank >= 0) {
        std::lock_guard<std::mutex> l(mu_);
        if (auto it = members_.find(o.end_rank); it != members_.end() && it->second.w) {
          it->second.w->End(grpc::Status::OK);
          it->second.w.reset();
        }
      }
    }
    if (half_close) {
      // Why: every local rank is done or gone; the coordinator ends the host
      // stream once it has seen the half-close.
      stream_->WritesDone();
      break;
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  sender_done_ = true;
  cv_.notify_all();
}

void Group::RunReader() {
  v1::Plan p;
  while (stream_->Read(&p)) {
    auto plan = std::make_shared<const v1::Plan>(p);
    std::lock_guard<std::mutex> l(mu_);
    std::vector<LocalWriter*> to;
    for (auto& [rank, m] : members_) {
      if (!m.w) continue;
      if (plan->ranks_size() > 0 && std::find(plan->ranks().begin(), plan->ranks().end(), rank) == plan->ranks().end()) {
        continue;
      }
      to.push_back(m.w.get());
    }
    // Counted before the writes start, so a worker holding the plan sees it counted.
    relay_->Count([n = static_cast<int64_t>(to.size())](RelayStats& s) {
      ++s.plans_in;
      s.plans_out += n;
    });
    for (LocalWriter* w : to) w->Push(plan);
    if (plan->action() == v1::ABORT && plan->ranks_size() == 0) all_aborted_ = true;
  }
  {
    std::unique_lock<std::mutex> l(mu_);
    reading_ended_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return sender_done_; });
  }
  grpc::Status st = stream_->Finish();
  if (!st.ok()) {
    PSYNC_LOG(WARNING) << "psync-relay: host stream (generation " << generation_ << ") ended: " << st.error_message();
  }
  std::lock_guard<std::mutex> l(mu_);
  // Why the same status: each worker sees what it would have seen on its own stream.
  EndLocked(st);
}

}  // namespace internal

PlanRelay::PlanRelay(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PlanRelay::~PlanRelay() { Shutdown(); }

int PlanRelay::port() const { return impl_->port; }

RelayStats PlanRelay::stats() const {
  std::lock_guard<std::mutex> l(impl_->stats_mu);
  return impl_->stats;
}

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
  b.AddListeningPort(absl::StrCat(opt.listen_host, ":", opt.port), grpc::InsecureServerCredentials(), &impl->port);
  b.RegisterService(impl->service.get());
  b.SetMaxReceiveMessageSize(16 << 20);
  impl->server = b.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return absl::UnavailableError(absl::StrCat("psync-relay cannot listen on ", opt.listen_host, ":", opt.port));
  }
  return std::unique_ptr<PlanRelay>(new PlanRelay(std::move(impl)));
}

}  // namespace psync::relay
