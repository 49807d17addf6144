// common/quantile_sketch.h: exact (numpy's rule) up to its exact limit, then
// every quantile within the documented relative accuracy, in bounded space.
#include "common/quantile_sketch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace psync {
namespace {

TEST(QuantileSketch, ExactLikeNumpyUpToItsLimit) {
  QuantileSketch s(0.01, 8);
  EXPECT_TRUE(std::isnan(s.Quantile(0.5)));
  for (double v : {4.0, 1.0, 3.0, 2.0}) s.Add(v);
  EXPECT_TRUE(s.exact());
  EXPECT_DOUBLE_EQ(s.Quantile(0.5), 2.5);
  EXPECT_DOUBLE_EQ(s.Quantile(0.9), 3.7);
  EXPECT_DOUBLE_EQ(s.Quantile(0.9), Quantile({4, 1, 3, 2}, 0.9));
}

TEST(QuantileSketch, WithinOnePercentOfTheTrueValueOfTheRankForAMillionSteps) {
  QuantileSketch s;  // 1%, exact up to 4096
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> step_ms(std::log(20.0), 0.6);  // a skewed step-time spread
  std::vector<double> all;
  for (int i = 0; i < 1000000; ++i) {
    const double v = step_ms(rng) + (i % 997 == 0 ? 500.0 : 0.0);  // occasional slow steps
    all.push_back(v);
    s.Add(v);
  }
  EXPECT_FALSE(s.exact());
  EXPECT_EQ(s.count(), 1000000);
  std::sort(all.begin(), all.end());
  for (double q : {0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    const double truth = all[static_cast<size_t>(std::floor(q * static_cast<double>(all.size() - 1)))];
    EXPECT_NEAR(s.Quantile(q), truth, 0.01 * truth) << "q=" << q;
  }
}

TEST(QuantileSketch, WorkPerValueStaysConstant) {
  QuantileSketch s;
  for (int i = 0; i < 10000; ++i) s.Add(1.0 + i % 100);
  const int64_t at_10k = s.work();
  for (int i = 0; i < 10000; ++i) s.Add(1.0 + i % 100);
  const int64_t first = s.work() - at_10k;
  for (int i = 0; i < 1000000; ++i) s.Add(1.0 + i % 100);
  const int64_t before = s.work();
  for (int i = 0; i < 10000; ++i) s.Add(1.0 + i % 100);
  EXPECT_EQ(s.work() - before, first) << "10k values cost the same after 1M as after 10k";
  EXPECT_EQ(first, 10000);
}

}  // namespace
}  // namespace psync
