// The sharding contract (worker/runtime/sharding.h), checked against a direct
// transcription of it for many geometries:
//   step s uses the global rows (s*B + k) mod N, k < B;
//   rank r takes [r*B/W, (r+1)*B/W) of them;
//   micro-batch m of rank r is [m*B/(W*M), (m+1)*B/(W*M)) of its shard.
#include "worker/runtime/sharding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

namespace psync::runtime {
namespace {

// Row k of step s, straight from the contract (128-bit: no overflow).
int64_t ContractRow(const BatchGeometry& g, int64_t step, int64_t k) {
  const __int128 v = static_cast<__int128>(step) * g.global_batch + k;
  return static_cast<int64_t>(v % g.dataset_rows);
}

// Checks every (rank, micro) of `step` against the contract, and that their
// concatenation in (rank, micro) order is exactly the step's B rows.
void CheckStep(const BatchGeometry& g, int64_t step) {
  const int64_t B = g.global_batch, W = g.world_size, M = g.accumulate;
  std::vector<int64_t> all;
  for (int r = 0; r < W; ++r) {
    const int64_t shard_first = r * B / W;
    for (int64_t m = 0; m < M; ++m) {
      const int64_t lo = m * B / (W * M), hi = (m + 1) * B / (W * M);
      std::vector<int64_t> want;
      for (int64_t k = shard_first + lo; k < shard_first + hi; ++k) want.push_back(ContractRow(g, step, k));
      const std::vector<int64_t> got = MicroBatchRows(g, step, r, m);
      ASSERT_EQ(got, want) << "B=" << B << " W=" << W << " M=" << M << " N=" << g.dataset_rows << " step " << step
                           << " rank " << r << " micro " << m;
      for (int64_t row : got) {
        ASSERT_GE(row, 0);
        ASSERT_LT(row, g.dataset_rows);
      }
      all.insert(all.end(), got.begin(), got.end());
    }
  }
  ASSERT_EQ(static_cast<int64_t>(all.size()), B);
  for (int64_t k = 0; k < B; ++k) ASSERT_EQ(all[k], ContractRow(g, step, k)) << "k=" << k;
}

TEST(Sharding, MatchesTheContractForManyGeometries) {
  for (int64_t B : {1, 2, 4, 12, 24, 64}) {
    for (int W : {1, 2, 3, 4}) {
      for (int64_t M : {1, 2, 3}) {
        if (B % (W * M) != 0) continue;
        for (int64_t N : {1, 5, 7, 64, 100, 1024}) {
          BatchGeometry g{B, W, M, N};
          EXPECT_EQ(g.micro_rows(), B / (W * M));
          EXPECT_EQ(g.shard_rows(), B / W);
          for (int64_t s : {0, 1, 2, 3, 17, 1000}) CheckStep(g, s);
        }
      }
    }
  }
}

TEST(Sharding, ConcreteExample) {
  // B=8, W=2, M=2, N=10. Step 1 uses rows 8,9,0,1,2,3,4,5.
  BatchGeometry g{8, 2, 2, 10};
  EXPECT_EQ(MicroBatchRows(g, 1, 0, 0), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(MicroBatchRows(g, 1, 0, 1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(MicroBatchRows(g, 1, 1, 0), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(MicroBatchRows(g, 1, 1, 1), (std::vector<int64_t>{4, 5}));
  // Step 2 continues: 16 mod 10 = 6.
  EXPECT_EQ(MicroBatchRows(g, 2, 0, 0), (std::vector<int64_t>{6, 7}));
}

TEST(Sharding, ConsecutiveStepsWalkThroughTheDataset) {
  // N a multiple of B: every row used exactly once per epoch.
  BatchGeometry g{16, 4, 2, 64};
  std::multiset<int64_t> seen;
  for (int64_t s = 0; s < 4; ++s) {
    for (int r = 0; r < 4; ++r) {
      for (int64_t m = 0; m < 2; ++m) {
        for (int64_t row : MicroBatchRows(g, s, r, m)) seen.insert(row);
      }
    }
  }
  ASSERT_EQ(seen.size(), 64u);
  for (int64_t row = 0; row < 64; ++row) EXPECT_EQ(seen.count(row), 1u) << row;
}

TEST(Sharding, HugeStepDoesNotOverflow) {
  BatchGeometry g{64, 4, 2, 1000};
  for (int64_t s : {int64_t{1} << 40, int64_t{1} << 57, INT64_MAX / 2, INT64_MAX - 1}) CheckStep(g, s);
}

}  // namespace
}  // namespace psync::runtime
