// Run statistics (worker/runtime/summary.h): numpy-style quantiles and the
// --summary JSON, whose median/p90 leave out the first 10 (warm-up) steps.
#include "worker/runtime/summary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/json.h"
#include "tests/common/temp_dir.h"

namespace psync::runtime {
namespace {

TEST(Quantile, LinearInterpolationLikeNumpy) {
  EXPECT_TRUE(std::isnan(Quantile({}, 0.5)));
  EXPECT_DOUBLE_EQ(Quantile({42}, 0.9), 42);
  EXPECT_DOUBLE_EQ(Quantile({4, 1, 3, 2}, 0.5), 2.5);  // unsorted input
  EXPECT_DOUBLE_EQ(Quantile({4, 1, 3, 2}, 0.9), 3.7);  // numpy.quantile([1,2,3,4], .9)
  EXPECT_DOUBLE_EQ(Quantile({4, 1, 3, 2}, 0.0), 1);
  EXPECT_DOUBLE_EQ(Quantile({4, 1, 3, 2}, 1.0), 4);
  EXPECT_DOUBLE_EQ(Quantile({10, 20, 30}, 0.5), 20);
}

RunSummary WithSteps(std::vector<double> ms) {
  RunSummary s;
  s.step_ms = StepTimes::Of(ms);
  return s;
}

TEST(RunSummary, MedianAndP90SkipTheFirstTenSteps) {
  // Ten slow warm-up steps (1000 ms), then 1..20 ms.
  std::vector<double> ms(10, 1000.0);
  for (int i = 1; i <= 20; ++i) ms.push_back(i);
  const RunSummary s = WithSteps(ms);
  ASSERT_EQ(s.step_ms.timed(), 20);
  EXPECT_DOUBLE_EQ(s.step_ms.Quantile(0), 1);  // the warm-up steps are not among them
  EXPECT_DOUBLE_EQ(s.median_step_ms(), 10.5);
  EXPECT_DOUBLE_EQ(s.p90_step_ms(), 18.1);  // position 0.9 * 19 = 17.1 -> 18 + 0.1
}

TEST(RunSummary, TenOrFewerStepsAreAllTimed) {
  const RunSummary ten = WithSteps({5, 1, 4, 2, 3, 10, 9, 8, 7, 6});
  EXPECT_EQ(ten.step_ms.timed(), 10);
  EXPECT_DOUBLE_EQ(ten.median_step_ms(), 5.5);
  EXPECT_DOUBLE_EQ(ten.p90_step_ms(), 9.1);
  // The 11th step is the first one after the warm-up.
  std::vector<double> eleven(10, 1000.0);
  eleven.push_back(3);
  EXPECT_DOUBLE_EQ(WithSteps(eleven).median_step_ms(), 3);
  EXPECT_DOUBLE_EQ(WithSteps(eleven).p90_step_ms(), 3);
  EXPECT_TRUE(std::isnan(WithSteps({}).median_step_ms()));
}

TEST(RunSummary, JsonHasTheFieldsAndNullForNonFinite) {
  RunSummary s;
  s.rank = 1;
  s.world_size = 2;
  s.steps_requested = 30;
  s.steps_completed = 12;
  s.final_loss = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> ms(10, 100.0);
  ms.push_back(2);
  ms.push_back(4);
  s.step_ms = StepTimes::Of(ms);
  s.exit_reason = "stopped by \"psyncctl\"";
  s.exit_code = 3;
  s.backend = "gloo";
  s.device = "cpu";
  s.total_s = 1.5;
  absl::StatusOr<json::Json> v = json::Parse(s.ToJson());
  ASSERT_TRUE(v.ok()) << v.status() << "\n" << s.ToJson();
  ASSERT_TRUE(v->is_object());
  auto num = [&](const char* key) {
    EXPECT_TRUE(v->contains(key) && (*v)[key].is_number()) << key;
    return v->contains(key) && (*v)[key].is_number() ? (*v)[key].get<double>() : std::nan("");
  };
  EXPECT_EQ(num("rank"), 1);
  EXPECT_EQ(num("world_size"), 2);
  EXPECT_EQ(num("steps_requested"), 30);
  EXPECT_EQ(num("steps_completed"), 12);
  EXPECT_DOUBLE_EQ(num("median_step_ms"), 3);
  EXPECT_DOUBLE_EQ(num("p90_step_ms"), 3.8);
  EXPECT_EQ(num("timed_steps"), 2);
  EXPECT_EQ(num("exit_code"), 3);
  EXPECT_DOUBLE_EQ(num("total_s"), 1.5);
  ASSERT_TRUE(v->contains("final_loss"));
  EXPECT_TRUE((*v)["final_loss"].is_null());
  ASSERT_TRUE(v->contains("exit_reason"));
  EXPECT_EQ((*v)["exit_reason"], "stopped by \"psyncctl\"");
  EXPECT_EQ((*v)["backend"], "gloo");
  EXPECT_EQ((*v)["device"], "cpu");
}

TEST(RunSummary, MemoryFieldsWhenKnown) {
  RunSummary s;
  absl::StatusOr<json::Json> v = json::Parse(s.ToJson());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->contains("optimizer_state_bytes"));
  EXPECT_FALSE(v->contains("gradient_bytes"));
  EXPECT_FALSE(v->contains("peak_device_bytes"));
  EXPECT_FALSE(v->contains("activation_bytes"));
  s.optimizer_state_bytes = 437152;
  s.gradient_bytes = 289024;
  s.activation_bytes = 576640;
  v = json::Parse(s.ToJson());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)["optimizer_state_bytes"].get<double>(), 437152);
  EXPECT_EQ((*v)["gradient_bytes"].get<double>(), 289024);
  EXPECT_EQ((*v)["activation_bytes"].get<double>(), 576640);
  EXPECT_FALSE(v->contains("peak_device_bytes"));  // CPU: not written
}

TEST(RunSummary, WriteJsonWritesTheFileAtomically) {
  test_support::TempDir dir("psync_runtime_summary");
  RunSummary s = WithSteps({1, 2, 3});
  s.rank = 0;
  s.final_loss = 0.25;
  const std::string path = dir.File("summary_0.json");
  ASSERT_TRUE(s.WriteJson(path).ok());
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), s.ToJson());
  EXPECT_FALSE(std::ifstream(path + ".tmp").good()) << "temporary file left behind";
  absl::Status bad = s.WriteJson(dir.File("no/such/dir/summary.json"));
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--summary"), absl::string_view::npos) << bad;
}

}  // namespace
}  // namespace psync::runtime
