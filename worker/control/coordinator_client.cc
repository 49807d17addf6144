#include "worker/control/coordinator_client.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "psync/common/exit_code.h"
#include "psync/common/logging.h"
#include "common/grpc_client.h"
#include "common/grpc_status.h"
#include "common/used_bitmap.h"
#include "psync/v1/coordinator.grpc.pb.h"

namespace psync::control {

namespace {

// The coordinator's answer (common/grpc_status.h: same code, same message),
// saying which call it answered and where.
absl::Status FromGrpc(const grpc::Status& answer, const std::string& target, const char* what) {
  const absl::Status st = FromGrpcStatus(answer);
  if (st.ok()) return st;
  if (absl::IsUnavailable(st)) {
    return absl::UnavailableError(absl::StrCat("coordinator at ", target, " unreachable (", what, "): ", st.message()));
  }
  return absl::Status(st.code(), absl::StrCat(what, " refused by coordinator at ", target, ": ", st.message()));
}

ddp::BucketPlan FromProto(const v1::BucketPlan& p) {
  ddp::BucketPlan out;
  for (const auto& b : p.buckets()) out.emplace_back(b.param_index().begin(), b.param_index().end());
  return out;
}

// The one decoding of a Plan: the bitmap unpacked for `num_params`
// parameters, the bucket plan as the reducer takes it.
IterationPlan FromProto(const v1::Plan& p, size_t num_params) {
  IterationPlan out;
  out.iteration = p.iteration();
  out.globally_unused = bitmap::Unpack(p.globally_unused(), num_params);
  if (p.has_bucket_plan()) {
    out.bucket_plan = FromProto(p.bucket_plan());
    out.bucket_plan_id = p.bucket_plan().id();
    out.applies_from = p.bucket_plan().applies_from_iteration();
  }
  out.action = p.action() == v1::STOP_AFTER ? PlanAction::kStopAfter
               : p.action() == v1::ABORT    ? PlanAction::kAbort
                                            : PlanAction::kContinue;
  out.reason = p.reason();
  out.stop_after = p.action() == v1::STOP_AFTER ? p.stop_after_iteration() : -1;
  out.regroup = p.action() == v1::STOP_AFTER && p.regroup();
  out.rejoin_generation = p.action() == v1::ABORT ? p.rejoin_generation() : 0;
  return out;
}

}  // namespace

struct CoordinatorClient::Impl {
  std::string target, token, job_id = "psync";
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  // UseTrainRelay: the Train stream goes here instead (null = to `stub`).
  std::shared_ptr<grpc::Channel> relay_channel;
  std::unique_ptr<v1::Coordinator::Stub> relay_stub;
  std::string stream_target;  // how errors name the stream's far end

  // Train stream. write_mu_ serializes Write/WritesDone/Finish.
  std::mutex write_mu;
  std::unique_ptr<grpc::ClientContext> train_ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::TrainUp, v1::Plan>> stream;
  std::thread reader;

  // The reader thread delivers every plan here (set by OpenTrainStream).
  std::shared_ptr<PlanMailbox> plans;
  size_t num_params = 0;  // the manifest Join sent: how plans are decoded

  // The stream's end, for the writers' errors. mu guards both.
  std::mutex mu;
  std::condition_variable cv;
  bool ended = false;        // reader saw the end of the stream
  // Why (if not a clean end after Done): Aborted when the coordinator ended
  // the stream because the job was aborted (a peer's fault: exit 4),
  // Unavailable otherwise (the coordinator is lost: exit 5). Tagged with its
  // exit code (include/psync/common/exit_code.h).
  absl::Status end_status;

  // Coordinator failover (see the header). `grace` > 0: a lost stream is
  // opened again with a Resume. The reader thread alone owns what the plans
  // said (next_plan .. epoch); `kept` and `connected` are under write_mu.
  std::chrono::milliseconds grace{0};
  v1::JoinRequest join_sent;
  int world_size = 0, lookahead = 1;
  int64_t generation = 0, start_iteration = 0;
  int64_t next_plan = 0;  // the first iteration whose plan was not delivered
  v1::BucketPlan bucket_plan;
  int64_t bucket_plan_announced_in = -1;
  int64_t stop_after = -1;
  std::string stop_reason;
  bool regroup = false;
  int64_t epoch = 0;  // the newest epoch obeyed
  std::deque<v1::Report> kept;  // back to next_plan - 2K: what a new coordinator may need again
  bool connected = false;       // `stream` carries writes
  std::atomic<bool> closing{false};  // Close() was called: no reconnecting

  // Heartbeats (see the header). writes_closed (under write_mu): Done was
  // written, nothing may follow it.
  std::chrono::milliseconds heartbeat_interval{1000};
  int rank = -1;
  std::atomic<int64_t> last_iteration{-1};
  bool writes_closed = false;
  std::thread heartbeat;
  std::mutex hb_mu;
  std::condition_variable hb_cv;
  bool hb_stop = false;

  void HeartbeatLoop() {
    v1::TrainUp up;
    up.mutable_heartbeat()->set_rank(rank);
    std::unique_lock<std::mutex> l(hb_mu);
    while (!hb_cv.wait_for(l, heartbeat_interval, [&] { return hb_stop; })) {
      l.unlock();
      up.mutable_heartbeat()->set_iteration(last_iteration.load());
      bool ok;
      {
        std::lock_guard<std::mutex> wl(write_mu);
        // Between streams (failover) there is nobody to tell; go on.
        ok = !writes_closed && (!connected || stream->Write(up) || grace.count() > 0);
      }
      l.lock();
      if (!ok) break;  // Done sent, or the stream broke (the reader reports why)
    }
  }

  // Reader thread: what Plan `p` tells a coordinator that takes over. False
  // for a plan this rank holds already (sent again after a Resume).
  bool Note(const v1::Plan& p) {
    epoch = std::max(epoch, p.epoch());
    if (p.action() == v1::ABORT) return true;
    if (p.iteration() < next_plan) return false;
    next_plan = p.iteration() + 1;
    if (p.has_bucket_plan()) {
      bucket_plan = p.bucket_plan();
      bucket_plan_announced_in = p.iteration();
    }
    if (p.action() == v1::STOP_AFTER && stop_after < 0) {
      stop_after = p.stop_after_iteration();
      stop_reason = p.reason();
      regroup = p.regroup();
    }
    std::lock_guard<std::mutex> wl(write_mu);
    while (!kept.empty() && kept.front().iteration() < next_plan - 2 * lookahead) kept.pop_front();
    return true;
  }

  // Reader thread: the Hello that re-registers this rank (coordinator.proto, "Resume").
  v1::TrainUp ResumeHello() const {
    v1::TrainUp up;
    v1::Hello* h = up.mutable_hello();
    h->set_job_id(job_id);
    h->set_rank(rank);
    h->set_generation(generation);
    v1::Resume* r = h->mutable_resume();
    *r->mutable_join() = join_sent;
    r->set_world_size(world_size);
    r->set_start_iteration(start_iteration);
    r->set_plan_lookahead(lookahead);
    r->set_next_plan(next_plan);
    *r->mutable_bucket_plan() = bucket_plan;
    r->set_bucket_plan_announced_in(bucket_plan_announced_in);
    r->set_stop_after(stop_after);
    r->set_stop_reason(stop_reason);
    r->set_regroup(regroup);
    r->set_epoch(epoch);
    return up;
  }

  // Why ride on: the coordinator died or the link to it broke (not a
  // refusal, not the job's end, not this process closing).
  bool ShouldRide(const grpc::Status& st, bool stale) const {
    if (grace.count() <= 0 || closing.load()) return false;
    const grpc::StatusCode c = st.error_code();
    return stale || c == grpc::StatusCode::UNAVAILABLE || c == grpc::StatusCode::UNKNOWN ||
           c == grpc::StatusCode::INTERNAL;
  }

  // Reader thread: opens a new Train stream with a Resume and sends the kept
  // reports on it, retrying with bounded backoff for `grace`. False when the
  // grace passed (`last_error` says what failed last) or Close() was called.
  bool Reconnect(std::string* last_error) {
    const auto deadline = std::chrono::steady_clock::now() + grace;
    std::chrono::milliseconds backoff(100);
    for (int attempt = 1;; ++attempt) {
      {
        std::unique_lock<std::mutex> l(mu);
        if (cv.wait_for(l, backoff, [&] { return closing.load(); })) return false;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
      const auto until = std::min(deadline, now + std::chrono::seconds(1));
      if (!channel->WaitForConnected(std::chrono::system_clock::now() + (until - now))) {
        *last_error = absl::StrCat("no connection (attempt ", attempt, ")");
        continue;
      }
      auto ctx = std::make_unique<grpc::ClientContext>();
      Prepare(ctx.get());
      auto fresh = stub->Train(ctx.get());
      const v1::TrainUp hello = ResumeHello();
      std::lock_guard<std::mutex> wl(write_mu);
      bool ok = !closing.load() && fresh->Write(hello);
      v1::TrainUp up;
      for (const v1::Report& r : kept) {
        if (!ok) break;
        *up.mutable_report() = r;
        ok = fresh->Write(up);
      }
      if (!ok) {
        ctx->TryCancel();
        *last_error = absl::StrCat("stream write failed: ", FromGrpcStatus(fresh->Finish()).ToString());
        if (closing.load()) return false;
        continue;
      }
      // Why in this order: the old stream goes before its context.
      stream = std::move(fresh);
      train_ctx = std::move(ctx);
      connected = true;
      // Why straight to the coordinator: a relay's host stream cannot
      // resume, so a rank behind one goes on with a stream of its own.
      stream_target = target;
      return true;
    }
  }

  void StopHeartbeats() {
    {
      std::lock_guard<std::mutex> l(hb_mu);
      hb_stop = true;
    }
    hb_cv.notify_all();
  }

  void Prepare(grpc::ClientContext* ctx) const {
    AddBearerToken(ctx, token);
  }

  void ReadLoop() {
    grpc::Status st;
    std::string ride_error;  // why the failover failed, if it did
    for (;;) {
      grpc::ClientReaderWriter<v1::TrainUp, v1::Plan>* s;
      {
        std::lock_guard<std::mutex> wl(write_mu);
        s = stream.get();
      }
      v1::Plan p;
      bool stale = false;
      while (s->Read(&p)) {
        if (p.epoch() < epoch) {
          // Why refuse: a newer coordinator drove this rank already; this
          // one was replaced (fencing, coordinator.proto).
          PSYNC_LOG(WARNING) << "plan of iteration " << p.iteration() << " from coordinator epoch " << p.epoch()
                             << ", older than epoch " << epoch << " this rank obeyed: ignoring that coordinator";
          stale = true;
          std::lock_guard<std::mutex> wl(write_mu);
          train_ctx->TryCancel();
          break;
        }
        if (Note(p)) plans->Deliver(FromProto(p, num_params));
      }
      {
        std::lock_guard<std::mutex> wl(write_mu);
        connected = false;
        st = s->Finish();
      }
      if (!ShouldRide(st, stale)) break;
      PSYNC_LOG(WARNING) << "coordinator at " << stream_target << " lost ("
                         << (stale ? std::string("a replaced coordinator") : st.error_message())
                         << "); training on while the plans last, reconnecting for up to " << grace.count() / 1000
                         << "s (--coordinator-grace)";
      const auto lost_at = std::chrono::steady_clock::now();
      plans->SetReconnecting(true);
      const bool back = Reconnect(&ride_error);
      plans->SetReconnecting(false);
      if (!back) {
        if (ride_error.empty()) ride_error = "closed";
        break;
      }
      PSYNC_LOG(INFO) << "re-registered with the coordinator at " << stream_target << " after "
                      << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                                lost_at)
                             .count()
                      << " ms (generation " << generation << ", holding plans through iteration " << next_plan - 1
                      << ")";
      ride_error.clear();
    }
    {
      std::lock_guard<std::mutex> wl(write_mu);
      writes_closed = true;
    }
    absl::Status why;
    if (!ride_error.empty() && !closing.load()) {
      why = Lost(absl::StrCat("no coordinator took over within ", grace.count() / 1000,
                              "s (--coordinator-grace): ", ride_error));
    } else if (st.error_code() == grpc::StatusCode::ABORTED) {
      // Why: the coordinator is alive and says the job was aborted (its
      // ABORT plan, which names the rank at fault, normally comes first).
      why = WithExitCode(absl::AbortedError(absl::StrCat("coordinator at ", stream_target,
                                                         " ended the Train stream: ", st.error_message())),
                         kExitPeerLost);
    } else {
      why = Lost(st.ok() ? std::string("Train stream ended by the coordinator")
                         : absl::StrCat(absl::StatusCodeToString(FromGrpcStatus(st).code()), ": ", st.error_message()));
    }
    {
      std::lock_guard<std::mutex> l(mu);
      ended = true;
      end_status = why;
    }
    cv.notify_all();
    plans->Close(why);
  }

  // "coordinator at TARGET lost: <what>", Unavailable, exit code 5.
  absl::Status Lost(const std::string& what) const {
    return WithExitCode(absl::UnavailableError(absl::StrCat("coordinator at ", stream_target, " lost: ", what)),
                        kExitCoordinatorLost);
  }

  // After a failed write: the reader's reason once the stream ended (it
  // normally has within moments), else "lost: <what>".
  absl::Status WriteFailed(const std::string& what) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(5), [&] { return ended; });
    if (!ended) return Lost(what);
    return WithExitCode(absl::UnavailableError(end_status.message()), ExitCodeOf(end_status, kExitCoordinatorLost));
  }
};


CoordinatorClient::CoordinatorClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorClient::~CoordinatorClient() { Close(); }

const std::string& CoordinatorClient::target() const { return impl_->target; }

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const std::string& target, const std::string& token, std::chrono::milliseconds timeout,
    const std::string& tls_ca_file) {
  auto impl = std::make_unique<Impl>();
  impl->target = target;
  impl->token = token;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = ClientCredentials(tls_ca_file);
  if (!creds.ok()) return creds.status();
  impl->channel = grpc::CreateCustomChannel(target, *creds, KeepaliveChannelArgs());
  if (!impl->channel->WaitForConnected(std::chrono::system_clock::now() + timeout)) {
    return absl::UnavailableError(absl::StrCat(
        "coordinator at ", target, " unreachable: no connection within ", timeout.count(), " ms",
        tls_ca_file.empty()
            ? " (is psync-coordinator running there? if it serves TLS, pass --tls-ca)"
            : absl::StrCat(" over TLS with CA '", tls_ca_file,
                           "' (is psync-coordinator running there with --tls-cert/--tls-key, and is "
                           "its certificate signed by that CA for this host name?)")));
  }
  impl->stub = v1::Coordinator::NewStub(impl->channel);
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(std::move(impl)));
}

absl::StatusOr<JoinResult> CoordinatorClient::Join(const JoinRequest& req, std::chrono::milliseconds timeout) {
  v1::JoinRequest r;
  r.set_job_id(req.job_id);
  r.set_requested_rank(req.requested_rank);
  r.set_world_size(req.world_size);
  std::string host = req.hostname;
  if (host.empty()) {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) == 0) host = buf;
  }
  r.set_hostname(host);
  r.set_host_id(req.host_id);
  r.set_pid(req.pid ? req.pid : static_cast<int64_t>(getpid()));
  r.set_device(req.device);
  r.set_backend(req.backend);
  for (const auto& p : req.manifest) {
    v1::ParamSpec* s = r.add_manifest();
    s->set_name(p.name);
    for (int64_t d : p.shape) s->add_shape(d);
    s->set_element_size(p.element_size);
  }
  r.set_bucket_cap_bytes(static_cast<int64_t>(req.bucket_caps.bucket_cap_bytes));
  r.set_first_bucket_cap_bytes(static_cast<int64_t>(req.bucket_caps.first_bucket_cap_bytes));
  r.set_start_iteration(req.start_iteration);
  r.set_agree_resume(req.agree_resume);
  for (int64_t step : req.checkpoint_steps) r.add_checkpoint_steps(step);
  r.set_generation(req.generation);
  if (req.live_step) r.set_live_step(*req.live_step);
  r.set_global_batch(req.global_batch);
  for (const auto& [name, value] : req.settings) {
    v1::JobSetting* s = r.add_settings();
    s->set_name(name);
    s->set_value(value);
  }
  impl_->job_id = req.job_id;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::JoinResponse resp;
  grpc::Status st = impl_->stub->Join(&ctx, r, &resp);
  if (!st.ok()) return FromGrpc(st, impl_->target, "Join");
  impl_->join_sent = r;
  impl_->world_size = resp.world_size();
  impl_->start_iteration = resp.start_iteration();
  impl_->next_plan = resp.start_iteration();
  impl_->lookahead = std::max(1, resp.plan_lookahead());
  impl_->bucket_plan = resp.initial_bucket_plan();
  impl_->bucket_plan_announced_in = -1;
  impl_->epoch = resp.epoch();
  JoinResult out;
  out.epoch = resp.epoch();
  out.rank = resp.rank();
  out.world_size = resp.world_size();
  out.generation = resp.generation();
  out.start_iteration = resp.start_iteration();
  out.store_prefix = resp.store_prefix();
  out.heal_source = resp.has_heal_source() ? resp.heal_source() : -1;
  out.live_recovery = resp.live_recovery();
  if (out.heal_source >= resp.world_size()) {
    return absl::InternalError(absl::StrCat("Join response from ", impl_->target, " names rank ", out.heal_source,
                                            " to heal from in a world of ", resp.world_size()));
  }
  out.initial_bucket_plan = FromProto(resp.initial_bucket_plan());
  impl_->num_params = req.manifest.size();
  if (resp.heartbeat_interval_ms() > 0) out.heartbeat_interval = std::chrono::milliseconds(resp.heartbeat_interval_ms());
  impl_->heartbeat_interval = out.heartbeat_interval;
  out.plan_lookahead = std::max(1, resp.plan_lookahead());
  out.host_ids.reserve(static_cast<size_t>(resp.rank_host_index_size()));
  for (int idx : resp.rank_host_index()) {
    if (idx < 0 || idx >= resp.host_ids_size()) {
      return absl::InternalError(absl::StrCat("Join response from ", impl_->target, " has host index ", idx,
                                              " but only ", resp.host_ids_size(), " host ids"));
    }
    out.host_ids.push_back(resp.host_ids(idx));
  }
  return out;
}

absl::Status CoordinatorClient::StoreSet(const std::string& key, const std::string& value) {
  v1::StoreSetRequest r;
  r.set_job_id(impl_->job_id);
  r.set_key(key);
  r.set_value(value);
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::StoreSetResponse resp;
  return FromGrpc(impl_->stub->StoreSet(&ctx, r, &resp), impl_->target,
                  absl::StrCat("StoreSet '", key, "'").c_str());
}

absl::StatusOr<std::string> CoordinatorClient::StoreGet(const std::string& key,
                                                        std::chrono::milliseconds timeout) {
  v1::StoreGetRequest r;
  r.set_job_id(impl_->job_id);
  r.set_key(key);
  r.set_timeout_ms(timeout.count());
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  // The server answers DEADLINE_EXCEEDED itself at `timeout`; allow slack for the trip.
  ctx.set_deadline(std::chrono::system_clock::now() + timeout + std::chrono::seconds(5));
  v1::StoreGetResponse resp;
  grpc::Status st = impl_->stub->StoreGet(&ctx, r, &resp);
  if (!st.ok()) return FromGrpc(st, impl_->target, absl::StrCat("StoreGet '", key, "'").c_str());
  return resp.value();
}

absl::Status CoordinatorClient::UseTrainRelay(const std::string& relay_target, std::chrono::milliseconds timeout) {
  if (impl_->stream) return absl::FailedPreconditionError("UseTrainRelay after OpenTrainStream");
  // Plaintext: the relay listens on 127.0.0.1 only; the token still goes along.
  auto ch = grpc::CreateCustomChannel(relay_target, grpc::InsecureChannelCredentials(), KeepaliveChannelArgs());
  if (!ch->WaitForConnected(std::chrono::system_clock::now() + timeout)) {
    return absl::UnavailableError(absl::StrCat("plan relay at ", relay_target, " unreachable: no connection within ",
                                               timeout.count(), " ms (is psync-relay running there?)"));
  }
  impl_->relay_channel = ch;
  impl_->relay_stub = v1::Coordinator::NewStub(ch);
  impl_->stream_target = absl::StrCat(impl_->target, " (via the plan relay at ", relay_target, ")");
  return absl::OkStatus();
}

void CoordinatorClient::RideThroughLoss(std::chrono::milliseconds grace) {
  impl_->grace = std::max(grace, std::chrono::milliseconds(0));
}

absl::Status CoordinatorClient::OpenTrainStream(int rank, int64_t generation, std::shared_ptr<PlanMailbox> plans) {
  if (impl_->stream) return absl::FailedPreconditionError("Train stream already open");
  if (!plans) return absl::InvalidArgumentError("OpenTrainStream needs a PlanMailbox to deliver plans into");
  if (impl_->stream_target.empty()) impl_->stream_target = impl_->target;
  impl_->plans = std::move(plans);
  impl_->train_ctx = std::make_unique<grpc::ClientContext>();
  impl_->Prepare(impl_->train_ctx.get());
  impl_->stream = (impl_->relay_stub ? impl_->relay_stub : impl_->stub)->Train(impl_->train_ctx.get());
  v1::TrainUp up;
  up.mutable_hello()->set_job_id(impl_->job_id);
  up.mutable_hello()->set_rank(rank);
  up.mutable_hello()->set_generation(generation);
  bool ok;
  {
    std::lock_guard<std::mutex> l(impl_->write_mu);
    ok = impl_->stream->Write(up);
  }
  impl_->connected = ok;
  impl_->generation = generation;
  impl_->rank = rank;
  impl_->reader = std::thread([this] { impl_->ReadLoop(); });
  impl_->heartbeat = std::thread([this] { impl_->HeartbeatLoop(); });
  if (!ok) return impl_->WriteFailed("cannot send hello");
  return absl::OkStatus();
}

absl::Status CoordinatorClient::SendReport(const Report& report) {
  if (!impl_->stream) return absl::FailedPreconditionError("SendReport before OpenTrainStream");
  v1::TrainUp up;
  v1::Report* r = up.mutable_report();
  r->set_iteration(report.iteration);
  r->set_used_bitmap(report.used_bitmap);
  r->set_loss(report.loss);
  r->set_last_step_ms(report.last_step_ms);
  r->set_tokens_per_s(report.tokens_per_s);
  for (int p : report.ready_order) r->add_ready_order(p);
  impl_->last_iteration.store(report.iteration);
  bool ok;
  {
    std::lock_guard<std::mutex> l(impl_->write_mu);
    const bool ride = impl_->grace.count() > 0 && !impl_->writes_closed;
    // Why keep it: a coordinator that takes over needs the reports of the
    // plans it sends again (the reader drops the old ones).
    if (ride) impl_->kept.push_back(*r);
    ok = impl_->connected && !impl_->writes_closed && impl_->stream->Write(up);
    // Riding through a loss, a report that could not go waits in `kept` for
    // the next stream; the reader says when no coordinator came back.
    if (ride) ok = true;
  }
  if (!ok) return impl_->WriteFailed("report write failed");
  return absl::OkStatus();
}

absl::Status CoordinatorClient::SendDone(const std::string& exit_reason, int exit_code) {
  if (!impl_->stream) return absl::FailedPreconditionError("SendDone before OpenTrainStream");
  v1::TrainUp up;
  up.mutable_done()->set_exit_reason(exit_reason);
  up.mutable_done()->set_exit_code(exit_code);
  bool ok = false;
  // Between streams (failover), a rank that finished cleanly waits up to the
  // grace for the next one: a coordinator that took over must hear that it
  // is done. A failing rank does not wait (its Done only informs).
  const auto deadline =
      std::chrono::steady_clock::now() + (exit_code == 0 ? impl_->grace : std::chrono::milliseconds(0));
  for (;;) {
    {
      std::lock_guard<std::mutex> l(impl_->write_mu);
      if (impl_->connected || impl_->writes_closed || std::chrono::steady_clock::now() >= deadline) {
        const bool was_closed = impl_->writes_closed;
        impl_->writes_closed = true;
        ok = !was_closed && impl_->connected && impl_->stream->Write(up);
        if (ok) impl_->stream->WritesDone();
        break;
      }
    }
    std::unique_lock<std::mutex> l(impl_->mu);
    if (impl_->cv.wait_for(l, std::chrono::milliseconds(50), [&] { return impl_->ended; })) {
      std::lock_guard<std::mutex> wl(impl_->write_mu);
      impl_->writes_closed = true;
      break;
    }
  }
  impl_->StopHeartbeats();
  {
    std::unique_lock<std::mutex> l(impl_->mu);
    impl_->cv.wait_for(l, std::chrono::seconds(5), [&] { return impl_->ended; });
  }
  if (!ok) return impl_->Lost("cannot send done");
  return absl::OkStatus();
}

void CoordinatorClient::Close() {
  if (!impl_) return;
  if (impl_->stream) {
    bool ended;
    {
      std::lock_guard<std::mutex> l(impl_->mu);
      impl_->closing = true;  // a reconnect in progress gives up
      ended = impl_->ended;
    }
    impl_->cv.notify_all();
    impl_->StopHeartbeats();
    if (!ended) {
      std::lock_guard<std::mutex> wl(impl_->write_mu);
      impl_->train_ctx->TryCancel();
    }
    if (impl_->heartbeat.joinable()) impl_->heartbeat.join();
    if (impl_->reader.joinable()) impl_->reader.join();
    impl_->stream.reset();
    impl_->train_ctx.reset();
  }
}

}  // namespace psync::control
