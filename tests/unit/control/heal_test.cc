// ShareTrainingState (control/heal.h): three forked ranks (Gloo over
// 127.0.0.1, and shared memory), each with its own MLP weights and AdamW state; rank 1's whole
// training state goes to the others in many small chunks, and afterwards
// every rank holds bit for bit the same parameters, optimizer state, step,
// data position and RNG words. The framing names a damaged chunk.
#include "worker/control/heal.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "psync/autograd/engine.h"
#include "psync/nn/loss.h"
#include "psync/optim/adamw.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "worker/checkpoint/training_state.h"
#include "worker/checkpoint/writer.h"
#include "worker/comm/file_store.h"
#include "worker/comm/process_group_factory.h"
#include "worker/nn/models/mlp.h"

namespace psync::control {
namespace {

using std::chrono::milliseconds;
using test_support::ExpectAllRanksOk;
using test_support::RunRanks;
using test_support::TempDir;

constexpr int kWorld = 3, kSource = 1;

checkpoint::CheckpointManifest Manifest(int rank) {
  checkpoint::CheckpointManifest m;
  m.step = 10 + rank;
  m.model = "mlp";
  m.optimizer = "adamw";
  m.data_position = {{"cursor", 100 * rank}, {"epoch", rank}};
  m.rng = {{"data", {uint64_t(rank), 0xfeedULL}}};
  m.world_size = kWorld;
  return m;
}

int Rank(const std::string& backend, int rank, const std::string& dir) {
  comm::GroupOptions go;
  go.timeout = milliseconds(20000);
  go.prefix = "heal";
  go.job_tag = "heal-test";
  auto pg = comm::CreateProcessGroup(backend, std::make_shared<comm::FileStore>(dir), rank, kWorld, go);
  CHILD_CHECK(rank, pg.ok(), pg.status().ToString());
  // Every rank's own model and optimizer state: other seeds, one step on other data.
  auto mlp = std::make_shared<nn::MLP>(std::vector<int64_t>{6, 32, 3}, Device::CPU(), 50 + rank);
  optim::OptimizerOptions oo;
  optim::AdamW adamw(mlp->named_parameters(), oo);
  Tensor x = Tensor::Full({4, 6}, 0.25f * static_cast<float>(rank + 1));
  Tensor y = Tensor::Full({4, 3}, -0.5f);
  CHILD_CHECK(rank, autograd::Backward(nn::MseLoss(mlp->Forward(autograd::Variable(x)), y)).ok(), "backward");
  CHILD_CHECK(rank, adamw.Step(0.01).ok(), "step");

  const checkpoint::CheckpointContents mine = checkpoint::CaptureTrainingState(mlp->named_parameters(), &adamw, Manifest(rank));
  HealOptions ho;
  ho.source = kSource;
  ho.chunk_bytes = 1000;  // many chunks (the state is a few KiB)
  ho.timeout = milliseconds(20000);
  absl::StatusOr<std::optional<checkpoint::CheckpointContents>> got = ShareTrainingState(**pg, ho, &mine);
  CHILD_CHECK(rank, got.ok(), got.status().ToString());
  CHILD_CHECK(rank, got->has_value() == (rank != kSource), "the source gets nothing back, the others the state");
  if (rank != kSource) {
    const checkpoint::CheckpointContents& in = **got;
    CHILD_CHECK(rank, in.manifest.step == 10 + kSource, absl::StrCat("step ", in.manifest.step));
    CHILD_CHECK(rank, in.manifest.data_position == Manifest(kSource).data_position, "data position");
    CHILD_CHECK(rank, in.manifest.rng == Manifest(kSource).rng, "rng words");
    absl::Status st = checkpoint::LoadParameters(in, "heal", mlp->named_parameters());
    CHILD_CHECK(rank, st.ok(), st.ToString());
    st = checkpoint::LoadOptimizerState(in, "heal", adamw);
    CHILD_CHECK(rank, st.ok(), st.ToString());
  }
  // Now every rank's whole state serialises to the same bytes.
  absl::StatusOr<std::string> now =
      checkpoint::SerializeCheckpoint(checkpoint::CaptureTrainingState(mlp->named_parameters(), &adamw, Manifest(0)));
  CHILD_CHECK(rank, now.ok(), now.status().ToString());
  auto all = (*pg)->AllgatherBytes(*now, milliseconds(20000));
  CHILD_CHECK(rank, all.ok(), all.status().ToString());
  for (const std::string& s : *all) CHILD_CHECK(rank, s == (*all)[0], "ranks hold different states after healing");
  // A bad source is refused on every rank alike, before any collective.
  ho.source = kWorld;
  CHILD_CHECK(rank, ShareTrainingState(**pg, ho, &mine).status().code() == absl::StatusCode::kInvalidArgument,
              "source out of range");
  return 0;
}

class HealOver : public ::testing::TestWithParam<std::string> {};

TEST_P(HealOver, EveryRankTakesTheSourcesWholeStateBitForBit) {
  TempDir dir;
  ExpectAllRanksOk(
      RunRanks(kWorld, [&](int rank) { return Rank(GetParam(), rank, dir.path()); }, std::chrono::seconds(60)));
}

INSTANTIATE_TEST_SUITE_P(Backends, HealOver, ::testing::Values("gloo", "shm"));

TEST(Heal, ADamagedOrMisplacedChunkIsNamed) {
  const std::string framed = FrameHealChunk(3, "some bytes of state");
  absl::StatusOr<absl::string_view> ok = OpenHealChunk(framed, 3, 2);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "some bytes of state");
  std::string flipped = framed;
  flipped.back() ^= 0x01;
  absl::Status st = OpenHealChunk(flipped, 3, 2).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(st.message(), "rank 2's training state: chunk 3 (19 bytes) does not match its CRC32");
  st = OpenHealChunk(framed, 4, 2).status();
  EXPECT_EQ(st.message(), "rank 2's training state: chunk 3 arrived where chunk 4 was due");
  st = OpenHealChunk("", 0, 2).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  st = OpenHealChunk(framed.substr(0, framed.size() - 1), 3, 2).status();
  EXPECT_EQ(st.message(), "rank 2's training state: chunk 3 says 19 bytes, but only 18 came");
  ASSERT_TRUE(OpenHealChunk(framed + "pad", 3, 2).ok()) << "padding to whole words is ignored";
  EXPECT_EQ(*OpenHealChunk(FrameHealChunk(0, ""), 0, 2), "") << "an empty chunk frames too";
}

}  // namespace
}  // namespace psync::control
