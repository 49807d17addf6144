// Each rank's share of an evaluation pass (data/eval_shard.h).
#include "worker/data/eval_shard.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/unit/data/data_test_util.h"

namespace psync::data {
namespace {

using namespace testing;  // NOLINT

// Every example is evaluated exactly once over the ranks; shares differ by at most one.
TEST(EvalBatches, RanksCoverEveryExampleOnceInBoundedBatches) {
  for (int64_t n : {0, 1, 7, 10, 64, 10000}) {
    for (int world : {1, 2, 3, 4}) {
      for (int64_t batch : {1, 3, 256}) {
        std::vector<int> seen(static_cast<size_t>(n), 0);
        int64_t min_share = n, max_share = 0;
        for (int r = 0; r < world; ++r) {
          absl::StatusOr<std::vector<ExampleRange>> b = EvalBatches(n, r, world, batch);
          ASSERT_TRUE(b.ok()) << b.status();
          int64_t share = 0, next = -1;
          for (const ExampleRange& e : *b) {
            EXPECT_GE(e.count, 1);
            EXPECT_LE(e.count, batch);
            if (next >= 0) {
              EXPECT_EQ(e.begin, next);  // contiguous
            }
            next = e.begin + e.count;
            for (int64_t i = e.begin; i < e.begin + e.count; ++i) ++seen[i];
            share += e.count;
          }
          min_share = std::min(min_share, share);
          max_share = std::max(max_share, share);
        }
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "n=" << n << " W=" << world << " example " << i;
        EXPECT_LE(max_share - min_share, 1);
      }
    }
  }
  ExpectError(EvalBatches(10, 2, 2, 4).status(), absl::StatusCode::kInvalidArgument, {"rank 2 of world 2"});
  ExpectError(EvalBatches(10, 0, 1, 0).status(), absl::StatusCode::kInvalidArgument, {"batch size is 0"});
}

}  // namespace
}  // namespace psync::data
