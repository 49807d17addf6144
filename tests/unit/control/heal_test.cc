// ShareTrainingState (control/heal.h): three forked ranks (Gloo over
// 127.0.0.1, and shared memory), each with its own MLP weights and AdamW
// state; rank 1's whole training state goes to the others in many small
// pieces (straight into rank 0's live tensors, into new ones on rank 2),
// and afterwards every rank holds bit for bit the same parameters,
// optimizer state, step, data position and RNG words. A piece damaged on
// the way, and a damaged header, are named.
#include "worker/control/heal.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "psync/autograd/engine.h"
#include "psync/nn/loss.h"
#include "psync/optim/adamw.h"
#include "tests/common/forwarding_group.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "worker/checkpoint/training_state.h"
#include "worker/checkpoint/writer.h"
#include "worker/comm/file_store.h"
#include "worker/comm/process_group_factory.h"
#include "worker/comm/then_work.h"
#include "worker/control/heal_header.h"
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

// Forwards every call to `inner`; on the receivers, flips one byte of the
// broadcast named `damaged` once it has arrived (memory or a bug, not the wire).
class DamagingGroup : public test_support::ForwardingGroup {
 public:
  DamagingGroup(comm::ProcessGroup* inner, std::string damaged) : ForwardingGroup(inner), damaged_(std::move(damaged)) {}
  std::shared_ptr<comm::Work> Broadcast(Tensor t, int root, const std::string& name) override {
    std::shared_ptr<comm::Work> w = ForwardingGroup::Broadcast(t, root, name);
    if (name != damaged_ || root == rank()) return w;
    return std::make_shared<comm::ThenWork>(w, [t] { static_cast<char*>(t.raw_data())[1] ^= 0x10; });
  }

 private:
  const std::string damaged_;
};

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
  ho.chunk_bytes = 200;  // many pieces, packed and straight (the state is a few KiB)
  ho.timeout = milliseconds(20000);
  // Rank 0 receives into its live tensors, rank 2 into new ones.
  absl::StatusOr<std::optional<checkpoint::CheckpointContents>> got =
      ShareTrainingState(**pg, ho, &mine, rank == 0 ? &mine : nullptr);
  CHILD_CHECK(rank, got.ok(), got.status().ToString());
  CHILD_CHECK(rank, got->has_value() == (rank != kSource), "the source gets nothing back, the others the state");
  if (rank != kSource) {
    const checkpoint::CheckpointContents& in = **got;
    CHILD_CHECK(rank, in.manifest.step == 10 + kSource, absl::StrCat("step ", in.manifest.step));
    CHILD_CHECK(rank, in.manifest.data_position == Manifest(kSource).data_position, "data position");
    CHILD_CHECK(rank, in.manifest.rng == Manifest(kSource).rng, "rng words");
    CHILD_CHECK(rank, in.params.size() == mine.params.size(), "every parameter");
    CHILD_CHECK(rank, in.params[0].second.SharesStorageWith(mine.params[0].second) == (rank == 0),
                "received in place exactly where asked");
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
  // A piece damaged after it arrived: every receiver names it once all came; the source is done.
  DamagingGroup damaging(pg->get(), "heal piece 3");
  got = ShareTrainingState(damaging, ho, &mine);
  if (rank == kSource) {
    CHILD_CHECK(rank, got.ok() && !got->has_value(), got.status().ToString());
  } else {
    CHILD_CHECK(rank, got.status().code() == absl::StatusCode::kDataLoss, got.status().ToString());
    CHILD_CHECK(rank,
                absl::StrContains(got.status().message(), "rank 1's training state: piece 3 of ") &&
                    absl::StrContains(got.status().message(), "does not match its CRC-32C"),
                got.status().ToString());
  }
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

HealHeader SomeHeader() {
  HealHeader h;
  h.metadata = {{"model", "mlp"}, {"step", "7"}};
  h.entries = {{"w", kFloat32, {300, 100}}, {"b", kFloat32, {100}}, {"optim.w.step", kInt64, {}}};
  h.chunk_bytes = 64 << 10;
  h.crcs.assign(PlanHealPieces(h.entries, h.chunk_bytes).size(), 0xabcdef01u);
  return h;
}

TEST(HealHeader, PlansBigTensorsStraightInWholeElementsAndPacksSmallOnes) {
  const HealHeader h = SomeHeader();
  const std::vector<HealPiece> pieces = PlanHealPieces(h.entries, h.chunk_bytes);
  ASSERT_EQ(pieces.size(), 3u);  // w: 120000 bytes in windows of 65536; b and the step packed
  EXPECT_FALSE(pieces[0].packed);
  EXPECT_EQ(pieces[0].bytes, 65536u);
  EXPECT_EQ(pieces[1].slices[0].offset, 65536u);
  EXPECT_EQ(pieces[1].bytes, 120000u - 65536u);
  EXPECT_TRUE(pieces[2].packed);
  ASSERT_EQ(pieces[2].slices.size(), 2u);
  EXPECT_EQ(pieces[2].bytes, 408u);
  EXPECT_EQ(DescribeHealPiece(h, pieces, 2), "piece 2 of 3 (408 bytes of tensors 'b', 'optim.w.step')");
  // A chunk that does not hold whole elements is cut to them.
  const std::vector<HealPiece> odd = PlanHealPieces({{"x", kInt64, {5}}}, 12);
  ASSERT_EQ(odd.size(), 5u);  // 40 bytes in windows of one 8-byte element
  EXPECT_EQ(odd[0].bytes, 8u);
}

TEST(HealHeader, RoundTripsAndNamesEveryKindOfDamage) {
  const HealHeader h = SomeHeader();
  const std::string text = EncodeHealHeader(h);
  absl::StatusOr<HealHeader> back = DecodeHealHeader(text, "rank 2's training state");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->metadata, h.metadata);
  ASSERT_EQ(back->entries.size(), 3u);
  EXPECT_EQ(back->entries[0].shape, (Shape{300, 100}));
  EXPECT_EQ(back->entries[2].dtype, kInt64);
  EXPECT_EQ(back->crcs, h.crcs);
  for (size_t at : {size_t{0}, size_t{20}, text.size() / 2, text.size() - 1}) {
    std::string flipped = text;
    flipped[at] ^= 0x04;
    absl::Status st = DecodeHealHeader(flipped, "rank 2's training state").status();
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << at;
    EXPECT_TRUE(absl::StrContains(st.message(), "rank 2's training state: the heal header")) << st;
  }
  for (size_t n : {size_t{0}, size_t{3}, text.size() - 5}) {
    EXPECT_EQ(DecodeHealHeader(text.substr(0, n), "r").status().code(), absl::StatusCode::kDataLoss) << n;
  }
  HealHeader wrong = h;
  wrong.crcs.pop_back();  // well formed, but not one CRC per piece
  EXPECT_EQ(DecodeHealHeader(EncodeHealHeader(wrong), "r").status().message(),
            "r: the heal header (" + std::to_string(EncodeHealHeader(wrong).size()) +
                " bytes) lists 2 CRCs for 3 pieces (every rank must run the same psync build)");
  wrong = h;
  wrong.entries[1].name = "w";
  EXPECT_TRUE(absl::StrContains(DecodeHealHeader(EncodeHealHeader(wrong), "r").status().message(),
                                "names tensor 1 'w' empty or twice"));
  wrong = h;
  wrong.entries[0].shape = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_TRUE(absl::StrContains(DecodeHealHeader(EncodeHealHeader(wrong), "r").status().message(),
                                "impossible shape"));
}

}  // namespace
}  // namespace psync::control
