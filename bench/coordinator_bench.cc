// Coordinator benchmark: report-to-plan round trip with N simulated workers
// (one Train stream each, multiplexed over a few channels, all in this
// process) against an in-process psync-coordinator on 127.0.0.1, and
// rendezvous time (N concurrent Joins until all return).
//
//   psync-coordinator-bench [--workers=1,8,64,512] [--iterations=0 (auto)] [--params=1000]
//
// Round trip sample = time from the start of an iteration (every worker is
// released at once and writes its Report) to that worker receiving Plan{i};
// it therefore includes waiting for the last of the N reports.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "psync/v1/coordinator.grpc.pb.h"
#include "common/flags.h"
#include "common/logging.h"
#include "server/coordinator_server.h"

ABSL_FLAG(std::string, workers, "1,8,64,512", "comma-separated worker counts");
ABSL_FLAG(int, iterations, 0, "iterations per size (0 = auto: 300 / 200 / 100 / 40)");
ABSL_FLAG(int, params, 1000, "parameters in the manifest");

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = psync::v1;

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int Run(int n, int iters, int params) {
  psync::server::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.job.world_size = n;
  o.job.join_timeout = std::chrono::seconds(120);
  o.job.report_timeout = std::chrono::seconds(120);
  auto srv = psync::server::CoordinatorServer::Start(o);
  if (!srv.ok()) {
    std::fprintf(stderr, "server: %s\n", std::string(srv.status().message()).c_str());
    return 1;
  }
  const std::string target = "127.0.0.1:" + std::to_string((*srv)->port());
  const int nch = std::min(n, 8);
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (int c = 0; c < nch; ++c) {
    grpc::ChannelArguments a;
    a.SetInt("grpc.channel_id", c);  // distinct channels (no subchannel sharing)
    a.SetInt("grpc.use_local_subchannel_pool", 1);
    stubs.push_back(v1::Coordinator::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), a)));
  }
  v1::JoinRequest jr;
  jr.set_job_id("psync");
  jr.set_requested_rank(-1);
  jr.set_hostname("bench");
  jr.set_backend("gloo");
  jr.set_bucket_cap_bytes(25 << 20);
  jr.set_first_bucket_cap_bytes(1 << 20);
  for (int i = 0; i < params; ++i) {
    auto* p = jr.add_manifest();
    p->set_name("layer" + std::to_string(i) + ".weight");
    p->add_shape(256);
    p->add_shape(256);
  }
  // ---- rendezvous
  std::vector<v1::JoinResponse> joined(static_cast<size_t>(n));
  std::atomic<int> failures{0};
  const auto t0 = Clock::now();
  {
    std::vector<std::thread> ts;
    for (int w = 0; w < n; ++w) {
      ts.emplace_back([&, w] {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        v1::JoinRequest r = jr;
        r.set_pid(w);
        if (!stubs[static_cast<size_t>(w % nch)]->Join(&ctx, r, &joined[static_cast<size_t>(w)]).ok()) ++failures;
      });
    }
    for (auto& t : ts) t.join();
  }
  const double rendezvous_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (failures) {
    std::fprintf(stderr, "%d joins failed\n", failures.load());
    return 1;
  }
  // ---- streams
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::TrainUp, v1::Plan>> rw;
  };
  std::vector<std::unique_ptr<Stream>> streams;
  for (int w = 0; w < n; ++w) {
    auto s = std::make_unique<Stream>();
    s->rw = stubs[static_cast<size_t>(w % nch)]->Train(&s->ctx);
    v1::TrainUp up;
    up.mutable_hello()->set_job_id("psync");
    up.mutable_hello()->set_rank(joined[static_cast<size_t>(w)].rank());
    up.mutable_hello()->set_generation(joined[static_cast<size_t>(w)].generation());
    s->rw->Write(up);
    streams.push_back(std::move(s));
  }
  std::mutex mu;
  std::condition_variable cv;
  int go_iter = -1;
  Clock::time_point iter_start;
  std::vector<std::vector<double>> samples(static_cast<size_t>(n));
  std::atomic<int> finished{0};
  const std::string bitmap(static_cast<size_t>((params + 7) / 8), '\xff');
  std::vector<std::thread> workers;
  for (int w = 0; w < n; ++w) {
    workers.emplace_back([&, w] {
      auto& s = *streams[static_cast<size_t>(w)];
      for (int it = 0; it < iters; ++it) {
        Clock::time_point start;
        {
          std::unique_lock<std::mutex> l(mu);
          cv.wait(l, [&] { return go_iter >= it; });
          start = iter_start;
        }
        v1::TrainUp up;
        up.mutable_report()->set_iteration(it);
        up.mutable_report()->set_used_bitmap(bitmap);
        up.mutable_report()->set_last_step_ms(1.0);
        v1::Plan plan;
        if (!s.rw->Write(up) || !s.rw->Read(&plan) || plan.iteration() != it) {
          std::fprintf(stderr, "worker %d: stream failed at iteration %d\n", w, it);
          std::abort();
        }
        samples[static_cast<size_t>(w)].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - start).count());
        finished.fetch_add(1);
      }
    });
  }
  for (int it = 0; it < iters; ++it) {
    {
      std::lock_guard<std::mutex> l(mu);
      iter_start = Clock::now();
      go_iter = it;
    }
    cv.notify_all();
    while (finished.load() < (it + 1) * n) std::this_thread::yield();
  }
  for (auto& t : workers) t.join();
  for (auto& s : streams) {
    v1::TrainUp up;
    up.mutable_done()->set_exit_reason("bench done");
    s->rw->Write(up);
    s->rw->WritesDone();
    s->rw->Finish();
  }
  std::vector<double> all;
  for (auto& v : samples) all.insert(all.end(), v.begin(), v.end());
  std::printf("%-8d %-6d %-10d %-12.3f %-12.3f %-12.3f %-14.1f\n", n, nch, iters, Pct(all, 50), Pct(all, 99),
              Pct(all, 100), rendezvous_ms);
  std::fflush(stdout);
  (*srv)->Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  psync::ParseFlagsOrExit("psync-coordinator-bench", "psync-coordinator-bench [--workers=1,8,64,512] [--iterations=0] [--params=1000]",
                          argc, argv, psync::FlagsDefinedIn(__FILE__));
  // The in-process coordinator logs every Join; 512 of them would bury the table.
  psync::SetMinLogLevel(psync::LogLevel::kWarning);
  std::printf("%-8s %-6s %-10s %-12s %-12s %-12s %-14s\n", "WORKERS", "CHANS", "ITERS", "P50_MS", "P99_MS",
              "MAX_MS", "RENDEZVOUS_MS");
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_workers), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1) {
      std::fprintf(stderr, "--workers: bad count '%s'\n", std::string(s).c_str());
      return 2;
    }
    int iters = absl::GetFlag(FLAGS_iterations);
    if (iters <= 0) iters = n <= 1 ? 300 : n <= 8 ? 200 : n <= 64 ? 100 : 40;
    if (Run(n, iters, absl::GetFlag(FLAGS_params)) != 0) return 1;
  }
  return 0;
}
