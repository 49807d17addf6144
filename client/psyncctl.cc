// psyncctl: control client for psync-coordinator (docs/cli-contract.md).
//
//   psyncctl [--coordinator=HOST:PORT] [--token=T] [--tls-ca=FILE] [--json] status|workers|buckets|unused|shutdown [--wait]|regroup|watch
//
// --tls-ca (env PSYNC_TLS_CA): talk TLS to a coordinator started with
// --tls-cert/--tls-key, trusting the PEM CA / certificate in FILE.
//
// Exit codes: 0 ok; 1 coordinator unreachable or RPC failed; 2 bad usage.
// --json prints the response message as JSON (one object; for watch, one per line).
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/flags.h"
#include "common/grpc_client.h"
#include "psync/v1/control.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "", "HOST:PORT (default: env PSYNC_COORDINATOR, else 127.0.0.1:29500)");
ABSL_FLAG(std::string, token, "", "bearer token (default: env PSYNC_TOKEN)");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA / certificate to trust: connect over TLS (default: env PSYNC_TLS_CA; else plaintext)");
ABSL_FLAG(bool, json, false, "print JSON instead of tables");
ABSL_FLAG(bool, wait, false, "shutdown: wait until every worker has finished or disconnected");
ABSL_FLAG(std::string, reason, "", "shutdown / regroup: the reason the workers and the event log show");
ABSL_FLAG(int, timeout, 5, "seconds to wait for the coordinator to answer");

namespace {

namespace v1 = psync::v1;

std::string g_target;
std::string g_token;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "psyncctl: %s\n", msg.c_str());
  return 1;
}

int RpcFail(const char* what, const grpc::Status& st) {
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
      st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return Fail(absl::StrCat("cannot reach coordinator at ", g_target, ": ", st.error_message()));
  }
  return Fail(absl::StrCat(what, " failed at coordinator ", g_target, ": ", st.error_message()));
}

void Prepare(grpc::ClientContext* ctx, bool deadline = true) {
  psync::AddBearerToken(ctx, g_token);
  if (deadline) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(absl::GetFlag(FLAGS_timeout)));
  }
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string StateName(v1::JobState s) {
  std::string n = v1::JobState_Name(s);
  return n.rfind("JOB_", 0) == 0 ? n.substr(4) : n;
}
std::string WorkerStateName(v1::WorkerState s) {
  std::string n = v1::WorkerState_Name(s);
  return n.rfind("WORKER_", 0) == 0 ? n.substr(7) : n;
}

// `host_ids`: add the HOST_ID column (ranks with the same one share a host's
// memory; JoinRequest.host_id) before NOTE.
void PrintWorkers(const google::protobuf::RepeatedPtrField<v1::WorkerInfo>& ws, bool host_ids = false) {
  size_t id_width = 7;
  if (host_ids) {
    for (const auto& w : ws) id_width = std::max(id_width, w.host_id().size());
  }
  std::printf("%-5s %-20s %-8s %-8s %-9s %-6s %-10s %-12s ", "RANK", "HOST", "PID", "DEVICE", "STATE", "ITER",
              "STEP_MS", "LOSS");
  if (host_ids) std::printf("%-*s ", static_cast<int>(id_width), "HOST_ID");
  std::printf("NOTE\n");
  for (const auto& w : ws) {
    std::printf("%-5d %-20s %-8lld %-8s %-9s %-6lld %-10.2f %-12.6g ", w.rank(), w.hostname().substr(0, 20).c_str(),
                static_cast<long long>(w.pid()), w.device().c_str(), WorkerStateName(w.state()).c_str(),
                static_cast<long long>(w.last_iteration()), w.last_step_ms(), w.last_loss());
    if (host_ids) std::printf("%-*s ", static_cast<int>(id_width), w.host_id().c_str());
    std::printf("%s\n", w.exit_reason().c_str());
  }
}

// "train streams 2: ranks 0,1 | ranks 2,3" (WorkerInfo.train_stream: ranks
// that share a number share a host stream); "" when no stream is open.
std::string TrainStreamsLine(const google::protobuf::RepeatedPtrField<v1::WorkerInfo>& ws) {
  std::map<int, std::vector<int>> ranks;
  for (const auto& w : ws) {
    if (w.train_stream() > 0) ranks[w.train_stream()].push_back(w.rank());
  }
  if (ranks.empty()) return "";
  std::vector<std::string> groups;
  for (const auto& [stream, rs] : ranks) {
    groups.push_back(absl::StrCat(rs.size() == 1 ? "rank " : "ranks ", absl::StrJoin(rs, ",")));
  }
  return absl::StrCat("train streams ", ranks.size(), ": ", absl::StrJoin(groups, " | "));
}

int Status(v1::Control::Stub* stub, bool json) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::StatusResponse r;
  grpc::Status st = stub->Status(&ctx, v1::StatusRequest(), &r);
  if (!st.ok()) return RpcFail("status", st);
  if (json) {
    std::printf("%s\n", ToJson(r).c_str());
    return 0;
  }
  std::printf("job %s  state %s  world %d/%d  generation %lld  restarts %d/%d  iteration %lld  backend %s\n",
              r.job_id().c_str(), StateName(r.state()).c_str(), r.joined(), r.world_size(),
              static_cast<long long>(r.generation()), r.restarts(), r.max_restarts(),
              static_cast<long long>(r.iteration()), r.backend().empty() ? "-" : r.backend().c_str());
  if (!r.reason().empty()) std::printf("reason: %s\n", r.reason().c_str());
  if (r.start_iteration() > 0) {
    std::printf("generation %lld started at iteration %lld\n", static_cast<long long>(r.generation()),
                static_cast<long long>(r.start_iteration()));
  }
  if (!r.last_restart_reason().empty()) std::printf("last restart: %s\n", r.last_restart_reason().c_str());
  if (r.restarts() > 0) {
    std::printf("recovery %s: %d in place, the last took %.2f s; %lld iteration(s) computed again in all\n",
                r.recovery().c_str(), r.live_recoveries(), r.last_recovery_s(),
                static_cast<long long>(r.recomputed_iterations()));
  }
  if (r.coordinator_restarts() != 0) {
    // Coordinator failover: a coordinator started again (or one that took
    // over the job from its workers, which cannot count those before it).
    std::printf("coordinator epoch %lld: %s\n", static_cast<long long>(r.coordinator_epoch()),
                r.coordinator_restarts() < 0
                    ? "took over a running job from its workers; earlier coordinators unknown (no --state-dir)"
                    : absl::StrCat("restarted ", r.coordinator_restarts(), " time(s) (--state-dir)").c_str());
  }
  if (r.min_world_size() > 0 && r.min_world_size() < r.max_world_size()) {
    std::printf("elastic: world %d of %d ranks (at least %d)%s%s\n", r.world_size(), r.max_world_size(),
                r.min_world_size(), r.world_change_reason().empty() ? "" : ": ", r.world_change_reason().c_str());
  }
  if (r.stop_after_iteration() >= 0) {
    std::printf("stopping after iteration %lld\n", static_cast<long long>(r.stop_after_iteration()));
  }
  if (const std::string streams = TrainStreamsLine(r.workers()); !streams.empty()) {
    std::printf("%s\n", streams.c_str());
  }
  if (r.slowest_rank() >= 0) {
    std::printf("slowest rank %d: %.2f ms per step (median %.2f ms, %+.1f%%)\n", r.slowest_rank(),
                r.slowest_step_ms(), r.median_step_ms(), r.slowest_vs_median_pct());
  }
  if (r.workers_size() > 0) PrintWorkers(r.workers());
  return 0;
}

int Workers(v1::Control::Stub* stub, bool json) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::WorkersResponse r;
  grpc::Status st = stub->Workers(&ctx, v1::WorkersRequest(), &r);
  if (!st.ok()) return RpcFail("workers", st);
  if (json) {
    std::printf("%s\n", ToJson(r).c_str());
    return 0;
  }
  if (r.workers_size() == 0) {
    std::printf("no workers joined yet\n");
    return 0;
  }
  PrintWorkers(r.workers(), /*host_ids=*/true);
  return 0;
}

int Buckets(v1::Control::Stub* stub, bool json) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::BucketsResponse r;
  grpc::Status st = stub->Buckets(&ctx, v1::BucketsRequest(), &r);
  if (!st.ok()) return RpcFail("buckets", st);
  if (json) {
    std::printf("%s\n", ToJson(r).c_str());
    return 0;
  }
  if (r.param_names_size() == 0) {
    std::printf("no bucket plan yet (no worker joined)\n");
    return 0;
  }
  const auto& plan = r.plan();
  std::printf("bucket plan %lld (%s), applies from iteration %lld: %d buckets; caps %lld bytes (first %lld)\n",
              static_cast<long long>(plan.id()),
              plan.id() == 0 ? "reverse registration order" : "rank 0's ready order",
              static_cast<long long>(plan.applies_from_iteration()), plan.buckets_size(),
              static_cast<long long>(r.bucket_cap_bytes()), static_cast<long long>(r.first_bucket_cap_bytes()));
  std::printf("%-7s %-12s %-7s %s\n", "BUCKET", "BYTES", "PARAMS", "NAMES");
  for (int b = 0; b < plan.buckets_size(); ++b) {
    std::vector<std::string> names;
    for (int p : plan.buckets(b).param_index()) {
      names.push_back(p >= 0 && p < r.param_names_size() ? r.param_names(p) : absl::StrCat("#", p));
    }
    std::printf("%-7d %-12lld %-7d %s\n", b, static_cast<long long>(plan.buckets(b).bytes()),
                plan.buckets(b).param_index_size(), absl::StrJoin(names, ", ").c_str());
  }
  return 0;
}

int Unused(v1::Control::Stub* stub, bool json) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::UnusedResponse r;
  grpc::Status st = stub->Unused(&ctx, v1::UnusedRequest(), &r);
  if (!st.ok()) return RpcFail("unused", st);
  if (json) {
    std::printf("%s\n", ToJson(r).c_str());
    return 0;
  }
  if (r.iteration() < 0) {
    std::printf("no iteration completed yet\n");
    return 0;
  }
  std::printf("iteration %lld: %d of %d parameters unused on every rank\n",
              static_cast<long long>(r.iteration()), r.param_names_size(), r.num_params());
  for (int i = 0; i < r.param_names_size(); ++i) {
    std::printf("  %d  %s\n", r.param_index(i), r.param_names(i).c_str());
  }
  return 0;
}

// psyncctl regroup: an elastic job stops every rank after the same
// iteration and forms its next generation with the ranks waiting to join.
int Regroup(v1::Control::Stub* stub, bool json, const std::string& reason) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::ShutdownRequest req;
  req.set_reason(reason.empty() ? "regroup requested by psyncctl" : reason);
  req.set_regroup(true);
  v1::ShutdownResponse r;
  grpc::Status st = stub->Shutdown(&ctx, req, &r);
  if (!st.ok()) return RpcFail("regroup", st);
  if (json) {
    std::printf("%s\n", ToJson(r).c_str());
  } else {
    std::printf("every rank stops after iteration %lld, then the next generation forms\n",
                static_cast<long long>(r.stop_after_iteration()));
  }
  return 0;
}

int Shutdown(v1::Control::Stub* stub, bool json, bool wait, const std::string& reason) {
  v1::ShutdownResponse r;
  {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::ShutdownRequest req;
    req.set_reason(reason.empty() ? "shutdown requested by psyncctl" : reason);
    grpc::Status st = stub->Shutdown(&ctx, req, &r);
    if (!st.ok()) return RpcFail("shutdown", st);
  }
  if (json && !wait) {
    std::printf("%s\n", ToJson(r).c_str());
  } else if (!json) {
    if (r.stop_after_iteration() < 0) {
      std::printf("job shut down before any worker started (state %s)\n", StateName(r.state()).c_str());
    } else {
      std::printf("%severy rank stops after iteration %lld (state %s)\n",
                  r.already_stopping() ? "already stopping: " : "",
                  static_cast<long long>(r.stop_after_iteration()), StateName(r.state()).c_str());
    }
  }
  if (!wait) return 0;
  while (true) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::StatusResponse s;
    grpc::Status st = stub->Status(&ctx, v1::StatusRequest(), &s);
    if (!st.ok()) return RpcFail("status", st);
    bool all_gone = true;
    for (const auto& w : s.workers()) {
      if (w.state() == v1::WORKER_JOINED || w.state() == v1::WORKER_TRAINING) all_gone = false;
    }
    if (s.state() == v1::JOB_FINISHED || s.state() == v1::JOB_ABORTED || all_gone) {
      if (json) {
        std::printf("{\"shutdown\":%s,\"final_status\":%s}\n", ToJson(r).c_str(), ToJson(s).c_str());
      } else {
        std::printf("job %s after iteration %lld%s%s\n", StateName(s.state()).c_str(),
                    static_cast<long long>(s.iteration()), s.reason().empty() ? "" : ": ",
                    s.reason().c_str());
      }
      return s.state() == v1::JOB_ABORTED ? 1 : 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Prints one event (text: time, type, message; or JSON).
void PrintEvent(const v1::Event& e, bool json) {
  if (json) {
    std::printf("%s\n", ToJson(e).c_str());
  } else {
    const time_t secs = static_cast<time_t>(e.unix_ms() / 1000);
    struct tm tm;
    localtime_r(&secs, &tm);
    std::string type = v1::EventType_Name(e.type());
    if (type.rfind("EVENT_", 0) == 0) type = type.substr(6);
    std::printf("%02d:%02d:%02d.%03d  %-15s %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(e.unix_ms() % 1000), type.c_str(), e.message().c_str());
  }
  std::fflush(stdout);
}

// How long watch waits for a lost coordinator to come back (coordinator
// failover), as a worker's --coordinator-grace does by default.
constexpr std::chrono::seconds kWatchGrace(60);

int Watch(v1::Control::Stub* stub, bool json) {
  // Why by time: a coordinator that answers again (failover) replays its
  // history, which may hold what was printed already; after a reconnect the
  // events up to the last printed one (by time, and by message within its
  // millisecond) are skipped. The first stream prints everything.
  int64_t last_ms = -1;
  std::set<std::string> at_last_ms;  // the messages printed in millisecond last_ms
  bool replaying = false;
  std::chrono::steady_clock::time_point lost_since{};  // {} = not lost
  while (true) {
    grpc::ClientContext ctx;
    Prepare(&ctx, /*deadline=*/false);
    v1::WatchRequest req;
    req.set_include_history(true);
    auto reader = stub->Watch(&ctx, req);
    v1::Event e;
    while (reader->Read(&e)) {
      lost_since = {};
      if (replaying && (e.unix_ms() < last_ms || (e.unix_ms() == last_ms && at_last_ms.count(e.message())))) continue;
      replaying = false;
      if (e.unix_ms() != last_ms) at_last_ms.clear();
      last_ms = e.unix_ms();
      at_last_ms.insert(e.message());
      PrintEvent(e, json);
    }
    grpc::Status st = reader->Finish();
    if (st.ok()) return 0;
    const auto now = std::chrono::steady_clock::now();
    const bool lost = lost_since != std::chrono::steady_clock::time_point{};
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE || (lost && now - lost_since > kWatchGrace)) {
      return RpcFail("watch", st);
    }
    if (!lost) {
      lost_since = now;
      std::fprintf(stderr, "psyncctl: watch: coordinator lost (%s); waiting up to %llds for it to come back\n",
                   st.error_message().c_str(), static_cast<long long>(kWatchGrace.count()));
    }
    replaying = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const psync::ParsedArgs parsed = psync::ParseFlagsOrExit(
      "psyncctl",
      "psyncctl [--coordinator=HOST:PORT] [--token=T] [--tls-ca=FILE] [--json] "
      "status|workers|buckets|unused|shutdown [--wait]|regroup|watch",
      argc, argv, psync::FlagsDefinedIn(__FILE__));
  std::vector<std::string> args = {argv[0]};
  args.insert(args.end(), parsed.positional.begin(), parsed.positional.end());
  if (args.size() != 2) {
    std::fprintf(stderr,
                 "psyncctl: expected one command: status|workers|buckets|unused|shutdown [--wait]|regroup|watch\n");
    return 2;
  }
  const std::string cmd = args[1];
  g_target = absl::GetFlag(FLAGS_coordinator);
  if (g_target.empty()) {
    const char* env = std::getenv("PSYNC_COORDINATOR");
    g_target = env && *env ? env : "127.0.0.1:29500";
  }
  g_token = absl::GetFlag(FLAGS_token);
  if (g_token.empty()) {
    if (const char* t = std::getenv("PSYNC_TOKEN")) g_token = t;
  }
  std::string tls_ca = absl::GetFlag(FLAGS_tls_ca);
  if (!parsed.given("tls_ca")) {
    if (const char* c = std::getenv("PSYNC_TLS_CA")) tls_ca = c;
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = psync::ClientCredentials(tls_ca);
  if (!creds.ok()) {
    std::fprintf(stderr, "psyncctl: --tls-ca: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  const int timeout = absl::GetFlag(FLAGS_timeout);
  if (cmd != "status" && cmd != "workers" && cmd != "buckets" && cmd != "unused" && cmd != "shutdown" &&
      cmd != "regroup" && cmd != "watch") {
    std::fprintf(stderr, "psyncctl: unknown command '%s'; expected status|workers|buckets|unused|shutdown|regroup|watch\n",
                 cmd.c_str());
    return 2;
  }
  // The long-lived client's arguments: watch outlives a coordinator that
  // restarts (reconnection tries 100 ms .. 1 s apart), no HTTP proxy.
  auto channel = grpc::CreateCustomChannel(g_target, *creds, psync::KeepaliveChannelArgs());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(timeout))) {
    return Fail(absl::StrCat(
        "cannot reach coordinator at ", g_target, ": no connection within ", timeout, "s",
        tls_ca.empty() ? " (is psync-coordinator running? set --coordinator or PSYNC_COORDINATOR; if it serves "
                         "TLS, pass --tls-ca)"
                       : absl::StrCat(" over TLS with CA '", tls_ca,
                                      "' (is psync-coordinator running with --tls-cert/--tls-key, and is its "
                                      "certificate signed by that CA for this host name?)")));
  }
  auto stub = v1::Control::NewStub(channel);
  if (cmd == "status") return Status(stub.get(), json);
  if (cmd == "workers") return Workers(stub.get(), json);
  if (cmd == "buckets") return Buckets(stub.get(), json);
  if (cmd == "unused") return Unused(stub.get(), json);
  if (cmd == "shutdown") return Shutdown(stub.get(), json, absl::GetFlag(FLAGS_wait), absl::GetFlag(FLAGS_reason));
  if (cmd == "regroup") return Regroup(stub.get(), json, absl::GetFlag(FLAGS_reason));
  return Watch(stub.get(), json);
}
