// Coordinator benchmark: psync-coordinator in its own process, N simulated
// workers in P client processes (so their CPU use does not hide the
// server's), talking the real protocol over 127.0.0.1.
//
//   psync-coordinator-bench [--workers=8,64,512,4096] [--ranks-per-stream=1] [--client-procs=4]
//                           [--channels=2] [--iterations=0 (auto)] [--params=1000] [--coordinator-bin=PATH]
//
// --ranks-per-stream=N (or a list, e.g. 1,8: each size in each mode, side by
// side): N > 1 simulates host streams (coordinator.proto "Host streams", as
// psync-launch's relay opens them): ranks are grouped N to a host (host_id),
// each host has one Train stream carrying its ranks, one ReportBatch of all
// of them per iteration up and one Plan per iteration down. A rank's sample
// is its host's batch write to its host's plan arrival (the relay's own hop
// on the host is not simulated; see bench/README.md).
//
// Per size N it reports
//   - report-to-plan round trip, p50 / p99 / max: from a worker writing its
//     Report{i} to that worker receiving Plan{i} (one sample per worker and
//     iteration). Every worker of a client process writes its report when
//     that process got Plan{i-1} on all its streams, so a sample includes
//     waiting for the last of the N reports (as a real worker would);
//   - the same from the LAST of the N reports of iteration i being written
//     (any process; one machine, so one steady clock) to each Plan{i}
//     arriving: the coordinator's aggregation and fan-out alone, without
//     the wait for the slowest report (LAST_P50 / LAST_P99);
//   - CPU per iteration (user + system, /proc/PID/stat) of the coordinator
//     (also per report: COORD_US_RPT) and of all client processes together,
//     over the measured iterations. On a machine with fewer cores than
//     processes the clients and the coordinator compete, so the latencies
//     include queueing for a core; the coordinator's CPU per iteration is
//     the part of them that is the coordinator's own work;
//   - rendezvous: from telling every client process to Join (they are
//     connected already) until the last of the N Joins returned;
//   - the coordinator's threads (most seen, sampled every 10 ms) and its RSS
//     (VmHWM, the peak) over the whole run.
// Clients use gRPC's callback API: one reactor per simulated worker, a few
// channels per process (--channels), no thread per worker.
//
// The driver never starts gRPC itself (it forks the client processes); a
// client process is this binary run with --client=... (internal).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "psync/v1/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, workers, "8,64,512,4096", "comma-separated worker counts");
ABSL_FLAG(std::string, ranks_per_stream, "1", "ranks per Train stream (1 = one stream per rank; N > 1 = host "
          "streams of N ranks); a comma-separated list runs each size in each mode");
ABSL_FLAG(int, client_procs, 4, "client processes the simulated workers are spread over");
ABSL_FLAG(int, channels, 2, "gRPC channels (TCP connections) per client process");
ABSL_FLAG(int, iterations, 0,
          "iterations per size (0 = auto: 2000 up to 8 workers, 1000 up to 64, 300 up to 512, else 40)");
ABSL_FLAG(int, params, 1000, "parameters in the manifest");
ABSL_FLAG(std::string, coordinator_bin, "", "psync-coordinator to run (default: next to this binary's build dir)");
ABSL_FLAG(std::string, coordinator_args, "", "extra flags for psync-coordinator, space separated");
// Internal: client mode "TARGET,FIRST,COUNT,ITERS,PARAMS,CHANNELS,SAMPLES_FILE,RANKS_PER_STREAM".
ABSL_FLAG(std::string, client, "", "internal: run as a client process");

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = psync::v1;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// ---------------------------------------------------------------- client process

struct ClientConfig {
  std::string target;
  int first = 0, count = 0, iters = 0, params = 0, channels = 1;
  int ranks_per_stream = 1;
  std::string samples_file;
};

class ClientProcess;

// One simulated Train stream as a callback reactor: one worker's, or (host
// streams) one host's carrying `ranks`.
class SimWorker final : public grpc::ClientBidiReactor<v1::TrainUp, v1::Plan> {
 public:
  SimWorker(ClientProcess* p, int index) : proc_(p), index_(index) {}
  // ranks: the stream's ranks (one = a single-rank stream, as a worker's).
  void Open(v1::Coordinator::Stub* stub, const std::vector<int>& ranks, int64_t generation);
  size_t rank_count() const { return ranks_.size(); }
  void SendReport(int64_t iteration);
  void SendDone();
  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& s) override;
  // Per iteration: when this worker's report was written and its plan
  // arrived (ms on the steady clock). Written by this worker's write
  // start (under mu_) and its reactions; read after OnDone.
  std::vector<double> sent_at, got_at;

 private:
  void WriteLocked();  // starts the next queued write
  ClientProcess* proc_;
  int index_;
  grpc::ClientContext ctx_;
  v1::Plan plan_;
  std::mutex mu_;
  std::vector<std::pair<v1::TrainUp, bool>> queue_;  // (message, last); front is being written while writing_
  v1::TrainUp current_;
  std::vector<int> ranks_;
  bool host_ = false;
  bool writing_ = false;
  bool closed_ = false;
  std::string bitmap_;
};

class ClientProcess {
 public:
  explicit ClientProcess(ClientConfig c) : cfg_(std::move(c)) {}
  int Run();
  void PlanArrived();
  void WorkerDone(bool ok, const std::string& why);
  const ClientConfig& cfg() const { return cfg_; }

 private:
  ClientConfig cfg_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs_;
  std::vector<std::unique_ptr<SimWorker>> workers_;
  std::atomic<int> plans_{0};
  std::atomic<int> iteration_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  int done_ = 0;
  bool failed_ = false;
  std::string failure_;
};

void SimWorker::Open(v1::Coordinator::Stub* stub, const std::vector<int>& ranks, int64_t generation) {
  bitmap_.assign(static_cast<size_t>((proc_->cfg().params + 7) / 8), '\xff');
  ranks_ = ranks;
  host_ = proc_->cfg().ranks_per_stream > 1;
  stub->async()->Train(&ctx_, this);
  v1::TrainUp hello;
  hello.mutable_hello()->set_job_id("psync");
  if (host_) {
    for (int r : ranks) hello.mutable_hello()->add_ranks(r);
  } else {
    hello.mutable_hello()->set_rank(ranks[0]);
  }
  hello.mutable_hello()->set_generation(generation);
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.emplace_back(std::move(hello), false);
    WriteLocked();
  }
  StartRead(&plan_);
  StartCall();
}

void SimWorker::WriteLocked() {
  if (writing_ || queue_.empty()) return;
  current_ = std::move(queue_.front().first);
  const bool last = queue_.front().second;
  queue_.erase(queue_.begin());
  writing_ = true;
  if (current_.has_report() || current_.has_report_batch()) sent_at.push_back(Ms(Clock::now().time_since_epoch()));
  if (last) {
    StartWriteLast(&current_, grpc::WriteOptions());
  } else {
    StartWrite(&current_);
  }
}

void SimWorker::SendReport(int64_t iteration) {
  v1::TrainUp up;
  auto fill = [&](v1::Report* r, int rank) {
    r->set_iteration(iteration);
    r->set_used_bitmap(bitmap_);
    r->set_last_step_ms(1.0);
    if (host_) r->set_rank(rank);
  };
  if (host_) {
    for (int r : ranks_) fill(up.mutable_report_batch()->add_reports(), r);
  } else {
    fill(up.mutable_report(), ranks_[0]);
  }
  std::lock_guard<std::mutex> l(mu_);
  queue_.emplace_back(std::move(up), false);
  WriteLocked();
}

void SimWorker::SendDone() {
  std::lock_guard<std::mutex> l(mu_);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    v1::TrainUp up;
    up.mutable_done()->set_exit_reason("bench done");
    if (host_) up.mutable_done()->set_rank(ranks_[i]);
    queue_.emplace_back(std::move(up), i + 1 == ranks_.size());
  }
  WriteLocked();
}

void SimWorker::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> l(mu_);
  writing_ = false;
  if (!ok) return;
  WriteLocked();
}

void SimWorker::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows
  got_at.push_back(Ms(Clock::now().time_since_epoch()));
  StartRead(&plan_);
  proc_->PlanArrived();
}

void SimWorker::OnDone(const grpc::Status& s) {
  proc_->WorkerDone(s.ok(), s.error_message());
}

void ClientProcess::PlanArrived() {
  if (plans_.fetch_add(1) + 1 < static_cast<int>(workers_.size())) return;
  // Every local worker has Plan{i}: start iteration i+1 (or finish).
  plans_.store(0);
  const int next = iteration_.fetch_add(1) + 1;
  for (auto& w : workers_) {
    if (next < cfg_.iters) {
      w->SendReport(next);
    } else {
      w->SendDone();
    }
  }
}

void ClientProcess::WorkerDone(bool ok, const std::string& why) {
  std::lock_guard<std::mutex> l(mu_);
  ++done_;
  if (!ok && !failed_) {
    failed_ = true;
    failure_ = why;
  }
  cv_.notify_all();
}

int ClientProcess::Run() {
  for (int c = 0; c < cfg_.channels; ++c) {
    grpc::ChannelArguments a;
    a.SetInt("grpc.channel_id", c);  // distinct connections (no subchannel sharing)
    a.SetInt("grpc.use_local_subchannel_pool", 1);
    a.SetMaxReceiveMessageSize(64 << 20);
    auto ch = grpc::CreateCustomChannel(cfg_.target, grpc::InsecureChannelCredentials(), a);
    if (!ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30))) {
      std::fprintf(stderr, "client: cannot connect to %s\n", cfg_.target.c_str());
      return 1;
    }
    stubs_.push_back(v1::Coordinator::NewStub(ch));
    channels_.push_back(ch);
  }
  v1::JoinRequest jr;
  jr.set_job_id("psync");
  jr.set_requested_rank(-1);
  jr.set_hostname("bench");
  jr.set_backend("gloo");
  jr.set_bucket_cap_bytes(25 << 20);
  jr.set_first_bucket_cap_bytes(1 << 20);
  for (int i = 0; i < cfg_.params; ++i) {
    auto* p = jr.add_manifest();
    p->set_name("layer" + std::to_string(i) + ".weight");
    p->add_shape(256);
    p->add_shape(256);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  char cmd[64];
  if (!std::fgets(cmd, sizeof(cmd), stdin)) return 1;  // "join"

  // ---- rendezvous: all Joins at once, answered when the world is complete.
  struct JoinCall {
    grpc::ClientContext ctx;
    v1::JoinRequest req;
    v1::JoinResponse resp;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<JoinCall>> joins;
  std::mutex jmu;
  std::condition_variable jcv;
  int answered = 0;
  for (int w = 0; w < cfg_.count; ++w) {
    auto j = std::make_unique<JoinCall>();
    j->req = jr;
    j->req.set_pid(cfg_.first + w);
    // 8 ranks per "host", or the host streams' grouping.
    j->req.set_host_id("bench-host-" +
                       std::to_string((cfg_.first + w) / (cfg_.ranks_per_stream > 1 ? cfg_.ranks_per_stream : 8)));
    j->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
    JoinCall* raw = j.get();
    stubs_[static_cast<size_t>(w % cfg_.channels)]->async()->Join(&raw->ctx, &raw->req, &raw->resp,
                                                                  [&, raw](grpc::Status s) {
                                                                    raw->status = std::move(s);
                                                                    std::lock_guard<std::mutex> l(jmu);
                                                                    ++answered;
                                                                    jcv.notify_all();
                                                                  });
    joins.push_back(std::move(j));
  }
  {
    std::unique_lock<std::mutex> l(jmu);
    jcv.wait(l, [&] { return answered == cfg_.count; });
  }
  for (auto& j : joins) {
    if (!j->status.ok()) {
      std::fprintf(stderr, "client: join failed: %s\n", j->status.error_message().c_str());
      return 1;
    }
  }
  std::printf("joined\n");
  std::fflush(stdout);
  if (!std::fgets(cmd, sizeof(cmd), stdin)) return 1;  // "train"

  // ---- training: streams, then lockstep iterations.
  // Streams: one per worker, or one per host group (workers with the same
  // (first + w) / ranks_per_stream, consecutive).
  const int rps = std::max(1, cfg_.ranks_per_stream);
  for (int w = 0; w < cfg_.count;) {
    std::vector<int> ranks;
    const int group = (cfg_.first + w) / rps;
    for (; w < cfg_.count && (cfg_.first + w) / rps == group; ++w) {
      ranks.push_back(joins[static_cast<size_t>(w)]->resp.rank());
    }
    const size_t s = workers_.size();
    workers_.push_back(std::make_unique<SimWorker>(this, static_cast<int>(s)));
    workers_.back()->Open(stubs_[s % static_cast<size_t>(cfg_.channels)].get(), ranks,
                          joins[0]->resp.generation());
  }
  for (auto& w : workers_) w->SendReport(0);
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return done_ == static_cast<int>(workers_.size()); });
    if (failed_) {
      std::fprintf(stderr, "client: a stream failed: %s\n", failure_.c_str());
      return 1;
    }
  }
  // Per worker (rank): ITERS send times, then ITERS arrival times (a host
  // stream's ranks share its times).
  std::ofstream out(cfg_.samples_file, std::ios::binary);
  for (auto& w : workers_) {
   for (size_t k = 0; k < w->rank_count(); ++k) {
    if (w->sent_at.size() != static_cast<size_t>(cfg_.iters) || w->got_at.size() != static_cast<size_t>(cfg_.iters)) {
      std::fprintf(stderr, "client: a worker has %zu reports and %zu plans, not %d\n", w->sent_at.size(),
                   w->got_at.size(), cfg_.iters);
      return 1;
    }
    out.write(reinterpret_cast<const char*>(w->sent_at.data()),
              static_cast<std::streamsize>(w->sent_at.size() * sizeof(double)));
    out.write(reinterpret_cast<const char*>(w->got_at.data()),
              static_cast<std::streamsize>(w->got_at.size() * sizeof(double)));
   }
  }
  out.close();
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}

int RunClient(const std::string& spec) {
  std::vector<std::string> f = absl::StrSplit(spec, ',');
  ClientConfig c;
  if (f.size() != 8 || !absl::SimpleAtoi(f[7], &c.ranks_per_stream) || !absl::SimpleAtoi(f[1], &c.first) || !absl::SimpleAtoi(f[2], &c.count) ||
      !absl::SimpleAtoi(f[3], &c.iters) || !absl::SimpleAtoi(f[4], &c.params) ||
      !absl::SimpleAtoi(f[5], &c.channels)) {
    std::fprintf(stderr, "bad --client spec\n");
    return 2;
  }
  c.target = f[0];
  c.samples_file = f[6];
  return ClientProcess(c).Run();
}

// ---------------------------------------------------------------- driver

// A child with a pipe to its stdin and from its stdout.
struct Child {
  pid_t pid = -1;
  FILE* in = nullptr;   // we write commands
  FILE* out = nullptr;  // we read lines
};

Child Spawn(const std::vector<std::string>& argv, bool pipes, const std::string& log) {
  int to_child[2] = {-1, -1}, from_child[2] = {-1, -1};
  if (pipes && (pipe(to_child) != 0 || pipe(from_child) != 0)) return {};
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    if (pipes) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
    } else {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  if (pipes) {
    close(to_child[0]);
    close(from_child[1]);
    c.in = fdopen(to_child[1], "w");
    c.out = fdopen(from_child[0], "r");
  }
  return c;
}

bool ReadLine(Child& c, const char* want) {
  char buf[256];
  if (!std::fgets(buf, sizeof(buf), c.out)) return false;
  return std::strncmp(buf, want, std::strlen(want)) == 0;
}

void Send(Child& c, const char* line) {
  std::fprintf(c.in, "%s\n", line);
  std::fflush(c.in);
}

// Threads and VmHWM (kB) of `pid`.
void ProcStats(pid_t pid, long* threads, long* hwm_kb) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Threads:", 0) == 0) *threads = std::stol(line.substr(8));
    if (line.rfind("VmHWM:", 0) == 0) *hwm_kb = std::stol(line.substr(6));
  }
}

// CPU seconds (user + system) `pid` has used so far.
double CpuSeconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double Pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string SelfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

int RunSize(int n, int rps, int iters, int params, int procs, int channels, const std::string& coord_bin,
            const std::string& coord_args) {
  char tmpl[] = "/tmp/psync-coord-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  const std::string dir = tmpl;
  std::vector<std::string> cargv = {coord_bin, "--host=127.0.0.1", "--port=0", "--port-file=" + dir + "/port",
                                    "--world-size=" + std::to_string(n), "--join-timeout=600s",
                                    "--report-timeout=600s", "--heartbeat-timeout=600s"};
  for (absl::string_view a : absl::StrSplit(coord_args, ' ', absl::SkipEmpty())) cargv.emplace_back(a);
  Child coord = Spawn(cargv, false, dir + "/coordinator.log");
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::ifstream f(dir + "/port");
    if (!(f >> port)) port = 0;
    if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (port == 0) {
    std::fprintf(stderr, "coordinator did not start (log in %s)\n", dir.c_str());
    return 1;
  }
  const std::string target = "127.0.0.1:" + std::to_string(port);
  // Processes split the streams (a host's ranks stay in one process).
  const int streams = (n + rps - 1) / rps;
  procs = std::max(1, std::min(procs, streams));
  std::vector<Child> clients;
  const std::string self = SelfPath();
  for (int p = 0; p < procs; ++p) {
    const int first = std::min(n, streams * p / procs * rps);
    const int count = std::min(n, streams * (p + 1) / procs * rps) - first;
    clients.push_back(Spawn({self, absl::StrCat("--client=", target, ",", first, ",", count, ",", iters, ",", params,
                                                ",", channels, ",", dir, "/samples", p, ",", rps)},
                            true, ""));
  }
  for (auto& c : clients) {
    if (!ReadLine(c, "ready")) {
      std::fprintf(stderr, "a client process failed to start\n");
      return 1;
    }
  }
  // Sample the coordinator's threads while the run goes on.
  std::atomic<bool> stop{false};
  std::atomic<long> max_threads{0};
  std::thread sampler([&] {
    while (!stop.load()) {
      long t = 0, hwm = 0;
      ProcStats(coord.pid, &t, &hwm);
      if (t > max_threads.load()) max_threads.store(t);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const double cpu0 = CpuSeconds(coord.pid);
  const auto t0 = Clock::now();
  for (auto& c : clients) Send(c, "join");
  bool ok = true;
  for (auto& c : clients) ok = ReadLine(c, "joined") && ok;
  const double rendezvous_ms = Ms(Clock::now() - t0);
  long threads_after_join = 0, hwm_after_join = 0;
  ProcStats(coord.pid, &threads_after_join, &hwm_after_join);
  const double cpu1 = CpuSeconds(coord.pid);
  double client_cpu1 = 0, client_cpu2 = 0;
  for (auto& c : clients) client_cpu1 += CpuSeconds(c.pid);
  const auto t1 = Clock::now();
  for (auto& c : clients) Send(c, "train");
  for (auto& c : clients) ok = ReadLine(c, "done") && ok;
  const double cpu2 = CpuSeconds(coord.pid);
  for (auto& c : clients) client_cpu2 += CpuSeconds(c.pid);  // not reaped yet, so /proc still has it
  const double train_s = std::chrono::duration<double>(Clock::now() - t1).count();
  long threads_end = 0, hwm_kb = 0;
  ProcStats(coord.pid, &threads_end, &hwm_kb);
  if (std::getenv("PSYNC_BENCH_VERBOSE")) {
    std::fprintf(stderr,
                 "  n=%d: coordinator peak RSS %.1f MB after rendezvous, %.1f MB at the end; coordinator CPU %.2f s "
                 "for the rendezvous, %.3f ms per iteration (%.0f%% of the training wall time)\n",
                 n, hwm_after_join / 1024.0, hwm_kb / 1024.0, cpu1 - cpu0, (cpu2 - cpu1) * 1000.0 / iters,
                 train_s > 0 ? (cpu2 - cpu1) / train_s * 100.0 : 0.0);
  }
  stop.store(true);
  sampler.join();
  // sent[w][i], got[w][i] for every worker w (all processes) and iteration i.
  std::vector<std::vector<double>> sent, got;
  for (int p = 0; p < procs; ++p) {
    std::ifstream f(dir + "/samples" + std::to_string(p), std::ios::binary);
    std::vector<double> s(static_cast<size_t>(iters)), g(static_cast<size_t>(iters));
    const auto bytes = static_cast<std::streamsize>(static_cast<size_t>(iters) * sizeof(double));
    while (f.read(reinterpret_cast<char*>(s.data()), bytes) && f.read(reinterpret_cast<char*>(g.data()), bytes)) {
      sent.push_back(s);
      got.push_back(g);
    }
  }
  std::vector<double> last_sent(static_cast<size_t>(iters), 0);
  for (const auto& s : sent) {
    for (size_t i = 0; i < s.size(); ++i) last_sent[i] = std::max(last_sent[i], s[i]);
  }
  std::vector<double> all, after_last;
  for (size_t w = 0; w < sent.size(); ++w) {
    for (size_t i = 0; i < sent[w].size(); ++i) {
      all.push_back(got[w][i] - sent[w][i]);
      after_last.push_back(got[w][i] - last_sent[i]);
    }
  }
  for (auto& c : clients) {
    fclose(c.in);
    fclose(c.out);
    int st = 0;
    waitpid(c.pid, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  kill(coord.pid, SIGTERM);
  waitpid(coord.pid, nullptr, 0);
  if (!ok || all.size() != static_cast<size_t>(n) * static_cast<size_t>(iters)) {
    std::fprintf(stderr, "size %d failed (%zu samples; coordinator log in %s)\n", n, all.size(), dir.c_str());
    return 1;
  }
  const double coord_ms_it = (cpu2 - cpu1) * 1000.0 / iters;
  const double coord_us_rpt = coord_ms_it * 1000.0 / n;
  const double client_ms_it = (client_cpu2 - client_cpu1) * 1000.0 / iters;
  const long threads = std::max(max_threads.load(), threads_end);
  std::printf("%-8d %-5d %-6d %-6d %-6d %-9.3f %-9.3f %-9.3f %-9.3f %-9.3f %-10.1f %-12.3f %-12.1f %-12.3f %-9ld %-8.1f\n", n,
              rps, procs, procs * channels, iters, Pct(all, 50), Pct(all, 99), Pct(all, 100), Pct(after_last, 50),
              Pct(after_last, 99), rendezvous_ms, coord_ms_it, coord_us_rpt, client_ms_it, threads,
              static_cast<double>(hwm_kb) / 1024.0);
  std::printf("RESULT impl=coordinator workers=%d ranks_per_stream=%d p50_ms=%.3f p99_ms=%.3f last_p50_ms=%.3f last_p99_ms=%.3f "
              "rendezvous_ms=%.1f coord_cpu_ms_per_iter=%.3f coord_cpu_us_per_report=%.1f "
              "client_cpu_ms_per_iter=%.3f threads=%ld rss_mb=%.1f\n",
              n, rps, Pct(all, 50), Pct(all, 99), Pct(after_last, 50), Pct(after_last, 99), rendezvous_ms, coord_ms_it,
              coord_us_rpt, client_ms_it, threads, static_cast<double>(hwm_kb) / 1024.0);
  std::fflush(stdout);
  for (int p = 0; p < procs; ++p) unlink((dir + "/samples" + std::to_string(p)).c_str());
  unlink((dir + "/port").c_str());
  unlink((dir + "/coordinator.log").c_str());
  rmdir(dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  psync::ParseFlagsOrExit("psync-coordinator-bench",
                          "psync-coordinator-bench [--workers=8,64,512,4096] [--ranks-per-stream=1] [--client-procs=4] [--channels=2] "
                          "[--iterations=0] [--params=1000] [--coordinator-bin=PATH]",
                          argc, argv, psync::FlagsDefinedIn(__FILE__));
  if (!absl::GetFlag(FLAGS_client).empty()) return RunClient(absl::GetFlag(FLAGS_client));
  signal(SIGPIPE, SIG_IGN);
  std::string coord_bin = absl::GetFlag(FLAGS_coordinator_bin);
  if (coord_bin.empty()) {
    const std::string self = SelfPath();
    coord_bin = self.substr(0, self.rfind('/')) + "/../server/psync-coordinator";
  }
  if (access(coord_bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "psync-coordinator-bench: --coordinator-bin: cannot run %s\n", coord_bin.c_str());
    return 2;
  }
  {
    std::ifstream la("/proc/loadavg");
    std::string l1, l5, l15;
    la >> l1 >> l5 >> l15;
    std::printf("# %u cores, load average %s %s %s (before the run)\n", std::thread::hardware_concurrency(),
                l1.c_str(), l5.c_str(), l15.c_str());
  }
  std::printf("%-8s %-5s %-6s %-6s %-6s %-9s %-9s %-9s %-9s %-9s %-10s %-12s %-12s %-12s %-9s %-8s\n", "WORKERS", "RPS", "PROCS",
              "CHANS", "ITERS", "P50_MS", "P99_MS", "MAX_MS", "LAST_P50", "LAST_P99", "RENDEZ_MS", "COORD_MS_IT",
              "COORD_US_RPT", "CLIENT_MS_IT", "COORD_THR", "COORD_MB");
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_workers), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1) {
      std::fprintf(stderr, "psync-coordinator-bench: --workers: bad count '%s'\n", std::string(s).c_str());
      return 2;
    }
    int iters = absl::GetFlag(FLAGS_iterations);
    // A stall delays every sample of its iteration, so a p99 over fewer
    // than a few hundred iterations is one unlucky iteration (at 64 workers
    // and 100 iterations it read 0.4 or 3.6 ms from run to run, at 1000
    // iterations 0.36-0.44 ms).
    if (iters <= 0) iters = n <= 8 ? 2000 : n <= 64 ? 1000 : n <= 512 ? 300 : 40;
    for (absl::string_view r : absl::StrSplit(absl::GetFlag(FLAGS_ranks_per_stream), ',')) {
      int rps = 0;
      if (!absl::SimpleAtoi(r, &rps) || rps < 1) {
        std::fprintf(stderr, "psync-coordinator-bench: --ranks-per-stream: bad count '%s'\n", std::string(r).c_str());
        return 2;
      }
      if (RunSize(n, rps, iters, absl::GetFlag(FLAGS_params), absl::GetFlag(FLAGS_client_procs),
                  absl::GetFlag(FLAGS_channels), coord_bin, absl::GetFlag(FLAGS_coordinator_args)) != 0) {
        return 1;
      }
    }
  }
  return 0;
}
