// psync-allreduce-latency-bench: latency of one float allreduce between
// `--world` ranks forked from this process (default 2), Gloo over 127.0.0.1.
// For every size (4 B .. 4 MiB, x4) and impl, rank 0 prints p50/p90/p99:
//
//   psync   GlooGroup::AllreduceSum(t)->Wait(): the issuing thread hands the
//           op to the group's communication thread and waits for it
//   shm     ShmGroup::AllreduceSum(t)->Wait(): the same through /dev/shm
//           (t staged through the workspace slots)
//   shm-buf the same on a tensor from ShmGroup::NewCollectiveBuffer (how the
//           reducer's buckets are made): reduced in place, nothing staged
//   raw     gloo::allreduce on the calling thread (same algorithm, same
//           transport, no psync queue): the floor
//
// --gap-us inserts that much busy work (spinning, like the compute of a
// training step) between iterations on every rank, so threads that block
// between collectives really go to sleep as they do in the job.
// cpu_us: rank 0's process CPU time per op (all its threads; the --gap-us
// spin excluded): what the collective costs a training step on a busy host.
// Machine-readable lines: "RESULT impl=psync bytes=... p50_us=... p90_us=... p99_us=... cpu_us=...".
//
//   psync-allreduce-latency-bench --iters=300 --gap-us=500
//   psync-allreduce-latency-bench --impls=shm,psync --bytes=29184,33587200
//   psync-allreduce-latency-bench --impls=shm,shm-buf --bytes=4,4096,29184 --shm-spin-us=50   # the former fixed spin
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "worker/comm/file_store.h"
#include "worker/comm/gloo/gloo_group.h"
#include "worker/comm/process_group_factory.h"
#include "psync/tensor/tensor.h"

ABSL_FLAG(int, iters, 300, "timed iterations per size (fewer for sizes over 256 KiB)");
ABSL_FLAG(int, warmup, 20, "untimed iterations per size");
ABSL_FLAG(int, world, 2, "ranks (processes forked on this machine)");
ABSL_FLAG(int, gap_us, 0, "busy work (microseconds) between iterations on every rank");
ABSL_FLAG(std::string, impls, "psync,shm,shm-buf,raw", "impls to run, in order");
ABSL_FLAG(int64_t, max_bytes, 4 << 20, "largest size");
ABSL_FLAG(std::string, bytes, "", "comma-separated sizes (instead of 4 B .. --max-bytes, x4)");
ABSL_FLAG(int64_t, shm_slot_bytes, 1 << 20, "shm workspace slot size");
ABSL_FLAG(int64_t, shm_small_bytes, 64 << 10, "shm: largest allreduce of the one-step algorithm");
ABSL_FLAG(int64_t, shm_spin_us, -1,
          "shm: spin this many us for a peer before sleeping on its futex (-1 = adaptive, or env PSYNC_SHM_SPIN_US)");

namespace {

using Clock = std::chrono::steady_clock;

void Spin(int us) {
  if (us <= 0) return;
  const auto end = Clock::now() + std::chrono::microseconds(us);
  while (Clock::now() < end) {
  }
}

// CPU time of this process (all its threads: the caller, the group's
// communication thread, Gloo's loop thread), in microseconds.
double CpuUs() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int RunRank(int rank, int world, const std::string& dir) {
  const int iters = absl::GetFlag(FLAGS_iters);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int gap = absl::GetFlag(FLAGS_gap_us);
  const std::vector<std::string> impls = absl::StrSplit(absl::GetFlag(FLAGS_impls), ',');

  auto store = std::make_shared<psync::comm::FileStore>(dir + "/psync");
  psync::comm::GlooOptions go;
  go.prefix = "bench";
  auto pg_or = psync::comm::GlooGroup::Create(store, rank, world, go);
  if (!pg_or.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, std::string(pg_or.status().message()).c_str());
    return 1;
  }
  auto pg = std::move(*pg_or);
  psync::comm::GroupOptions so;
  so.prefix = "bench-shm";
  so.job_tag = "bench";
  so.shm_slot_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_shm_slot_bytes));
  so.shm_small_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_shm_small_bytes));
  so.shm_spin_us = absl::GetFlag(FLAGS_shm_spin_us);
  auto shm_or = psync::comm::CreateProcessGroup("shm", store, rank, world, so);
  if (!shm_or.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, std::string(shm_or.status().message()).c_str());
    return 1;
  }
  auto shm = std::move(*shm_or);

  std::filesystem::create_directories(dir + "/raw");
  gloo::rendezvous::FileStore fs(dir + "/raw");
  gloo::rendezvous::PrefixStore ps("raw", fs);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  attr.ai_family = AF_INET;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
  ctx->setTimeout(std::chrono::seconds(30));
  ctx->connectFullMesh(ps, dev);

  if (rank == 0) {
    std::printf("%-6s %-10s %-6s %10s %10s %10s %10s\n", "impl", "bytes", "iters", "p50_us", "p90_us", "p99_us",
                "cpu_us");
  }
  uint32_t tag = 1;
  std::vector<int64_t> sizes;
  if (!absl::GetFlag(FLAGS_bytes).empty()) {
    for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_bytes), ',')) {
      int64_t b = 0;
      if (!absl::SimpleAtoi(part, &b) || b < 4) {
        std::fprintf(stderr, "psync-allreduce-latency-bench: --bytes: '%s' is not a size >= 4\n",
                     std::string(part).c_str());
        return 2;
      }
      sizes.push_back(b);
    }
  } else {
    for (int64_t b = 4; b <= absl::GetFlag(FLAGS_max_bytes); b *= 4) sizes.push_back(b);
  }
  for (const int64_t bytes : sizes) {
    const int64_t n = bytes / 4;
    const int it = bytes > (256 << 10) ? std::max(30, iters / 10) : iters;
    for (const std::string& impl : impls) {
      psync::Tensor t = psync::Tensor::Full({n}, 1.0f);
      if (impl == "shm-buf") {
        auto b = shm->NewCollectiveBuffer({n}, psync::kFloat32, psync::Device::CPU());
        if (!b.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", rank, std::string(b.status().message()).c_str());
          return 1;
        }
        t = *b;
      }
      std::vector<double> us;
      double cpu0 = 0;
      for (int i = 0; i < warmup + it; ++i) {
        Spin(gap);
        if (i == warmup) cpu0 = CpuUs();
        const auto t0 = Clock::now();
        if (impl == "psync" || impl == "shm" || impl == "shm-buf") {
          absl::Status st = (impl == "psync" ? pg : shm)->AllreduceSum(t, "bench")->Wait(std::chrono::seconds(30));
          if (!st.ok()) {
            std::fprintf(stderr, "rank %d: %s\n", rank, std::string(st.message()).c_str());
            return 1;
          }
        } else {
          gloo::AllreduceOptions opts(ctx);
          opts.setOutput(t.data<float>(), static_cast<size_t>(n));
          opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
          opts.setTag(tag);
          gloo::allreduce(opts);
        }
        const auto t1 = Clock::now();
        if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      const double cpu = (CpuUs() - cpu0 - gap * it) / it;  // this process's CPU per op, spin excluded
      ++tag;
      if (rank == 0) {
        std::printf("%-6s %-10lld %-6d %10.1f %10.1f %10.1f %10.1f\n", impl.c_str(), static_cast<long long>(bytes), it,
                    Pct(us, 0.5), Pct(us, 0.9), Pct(us, 0.99), cpu);
        std::printf("RESULT impl=%s bytes=%lld p50_us=%.1f p90_us=%.1f p99_us=%.1f cpu_us=%.1f\n", impl.c_str(),
                    static_cast<long long>(bytes), Pct(us, 0.5), Pct(us, 0.9), Pct(us, 0.99), cpu);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  psync::ParseFlagsOrExit("psync-allreduce-latency-bench",
                          "psync-allreduce-latency-bench [flags]  (allreduce latency: GlooGroup vs ShmGroup vs raw gloo)", argc,
                          argv, psync::FlagsDefinedIn(__FILE__));
  const int world = absl::GetFlag(FLAGS_world);
  char tmpl[] = "/tmp/psync-arlat-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  std::fflush(stdout);
  std::vector<pid_t> kids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) _exit(RunRank(r, world, dir));
    kids.push_back(pid);
  }
  int rc = 0;
  for (pid_t p : kids) {
    int status = 0;
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  std::filesystem::remove_all(dir);
  return rc;
}
