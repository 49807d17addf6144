// psync-heal-bench: how long healing a rank from a peer takes
// (control::ShareTrainingState, worker/control/heal.h): `--world` ranks
// forked from this process, Gloo over 127.0.0.1; rank 0 holds a training
// state of --mib MiB of float32 parameters plus AdamW's two moments (3x the
// parameters in all) and sends it to the others in pieces of at most
// --chunk-mib. The time covers the source's CRCs, the header, the transfer,
// the receivers' CRC checks and unpacking; with --in_place (the default, a
// replacement's path) the receivers write straight into their own state's
// tensors, so nothing is left to load; without it into new tensors (a
// survivor holding another step), which loading then copies. Beside it the
// floor: the same bytes as plain broadcasts of one buffer. Rank 0 prints:
//
//   RESULT impl=raw-broadcast world=2 state_mib=768 chunk_mib=64 median_ms=... mib_per_s=...
//   RESULT impl=psync-heal world=2 state_mib=768 chunk_mib=64 in_place=1 median_ms=... mib_per_s=...
//
// For scale: torchft reports recovering 12 GB from a live peer in about 5 s
// over a real network (its checkpointing/pg_transport.py); here both ends
// share one machine's 2 cores and its memory bandwidth.
//
//   psync-heal-bench --mib=256 --reps=3 [--in_place=false]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/bench_util.h"
#include "worker/checkpoint/training_state.h"
#include "worker/comm/file_store.h"
#include "worker/comm/process_group_factory.h"
#include "worker/control/heal.h"

ABSL_FLAG(int, world, 2, "ranks (rank 0 is the source)");
ABSL_FLAG(int, mib, 256, "parameters in MiB (the state is 3x: parameters and AdamW's two moments)");
ABSL_FLAG(int, chunk_mib, 64, "chunk size in MiB");
ABSL_FLAG(int, reps, 3, "heals to time (the median is printed)");
ABSL_FLAG(bool, in_place, true,
          "receivers pass their own state of the same shapes as the destination (a replacement's path); false: "
          "new tensors (a survivor holding another step)");
ABSL_FLAG(bool, raw, true, "also time the floor: the same bytes as --chunk_mib broadcasts of one float32 tensor, no framing or checks");

namespace psync::bench {
namespace {

constexpr int64_t kTensorFloats = int64_t{4} << 20;  // 16 MiB per tensor, like a large layer

checkpoint::CheckpointContents State(int mib) {
  optim::NamedParams params;
  NamedTensors moments;
  const int64_t floats = int64_t{mib} << 18;
  for (int64_t done = 0, i = 0; done < floats; done += kTensorFloats, ++i) {
    const int64_t n = std::min(kTensorFloats, floats - done);
    const std::string name = "layers." + std::to_string(i) + ".weight";
    params.emplace_back(name, autograd::Variable(Tensor::Full({n}, 0.5f), /*requires_grad=*/true));
    moments.emplace_back(name + ".exp_avg", Tensor::Full({n}, 0.01f));
    moments.emplace_back(name + ".exp_avg_sq", Tensor::Full({n}, 0.0001f));
  }
  checkpoint::CheckpointManifest m;
  m.step = 100;
  m.model = "bench";
  m.world_size = 2;
  return checkpoint::CaptureTrainingState(params, "adamw", std::move(moments), m);
}

int Rank(int rank, const std::string& dir) {
  const int world = absl::GetFlag(FLAGS_world);
  comm::GroupOptions go;
  go.timeout = std::chrono::milliseconds(120000);
  go.prefix = "heal-bench";
  auto pg = comm::CreateProcessGroup("gloo", std::make_shared<comm::FileStore>(dir), rank, world, go);
  if (!pg.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, pg.status().ToString().c_str());
    return 1;
  }
  // Every rank builds the state's shapes (a replacement has its model and
  // optimizer before it heals); rank 0's is the one sent.
  const checkpoint::CheckpointContents mine = State(absl::GetFlag(FLAGS_mib));
  const bool in_place = absl::GetFlag(FLAGS_in_place) && rank != 0;
  control::HealOptions ho;
  ho.source = 0;
  ho.chunk_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_chunk_mib)) << 20;
  ho.timeout = std::chrono::milliseconds(120000);
  std::vector<double> ms;
  for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
    if (!(*pg)->Barrier(ho.timeout).ok()) return 1;
    const Clock::time_point t0 = Clock::now();
    auto got = control::ShareTrainingState(**pg, ho, &mine, in_place ? &mine : nullptr);
    if (!got.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, got.status().ToString().c_str());
      return 1;
    }
    // The receivers' decoding counts: wait for the slowest one.
    if (!(*pg)->Barrier(ho.timeout).ok()) return 1;
    ms.push_back(Ms(Clock::now() - t0));
  }
  if (absl::GetFlag(FLAGS_raw)) {
    // The floor: the group's broadcast alone, from and into a buffer already touched.
    const int64_t floats = int64_t{3} * absl::GetFlag(FLAGS_mib) << 18;
    const int64_t chunk = static_cast<int64_t>(ho.chunk_bytes / 4);
    Tensor all = Tensor::Full({floats}, 0.25f);
    std::vector<double> raw;
    for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
      if (!(*pg)->Barrier(ho.timeout).ok()) return 1;
      const Clock::time_point t0 = Clock::now();
      for (int64_t first = 0; first < floats; first += chunk) {
        if (!(*pg)->Broadcast(all.View(first, {std::min(chunk, floats - first)}), 0, "raw")->Wait(ho.timeout).ok()) return 1;
      }
      if (!(*pg)->Barrier(ho.timeout).ok()) return 1;
      raw.push_back(Ms(Clock::now() - t0));
    }
    if (rank == 0) {
      const double state_mib = 3.0 * absl::GetFlag(FLAGS_mib);
      std::printf("RESULT impl=raw-broadcast world=%d state_mib=%.0f chunk_mib=%d median_ms=%.1f mib_per_s=%.0f\n", world,
                  state_mib, absl::GetFlag(FLAGS_chunk_mib), Median(raw), state_mib / (Median(raw) / 1000.0));
    }
  }
  if (rank == 0) {
    const double state_mib = 3.0 * absl::GetFlag(FLAGS_mib);
    const double median = Median(ms);
    std::printf("RESULT impl=psync-heal world=%d state_mib=%.0f chunk_mib=%d in_place=%d median_ms=%.1f mib_per_s=%.0f\n",
                world, state_mib, absl::GetFlag(FLAGS_chunk_mib), absl::GetFlag(FLAGS_in_place) ? 1 : 0, median,
                state_mib / (median / 1000.0));
  }
  return 0;
}

}  // namespace
}  // namespace psync::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int failed = psync::bench::ForkRanks("psync-heal-bench", absl::GetFlag(FLAGS_world), std::chrono::seconds(600),
                                             psync::bench::Rank);
  return failed == 0 ? 0 : 1;
}
