// Helpers shared by the worker/data tests: the Python reference
// (reference.py, standard library only, run with /usr/bin/python3), files of
// given bytes, and error checks.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "tests/common/subprocess.h"
#include "worker/data/dataset.h"

namespace psync::data::testing {

// Runs reference.py with `args`; fails the test (and returns "") when it fails.
inline std::string Reference(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/python3", PSYNC_DATA_TEST_DIR "/reference.py"};
  argv.insert(argv.end(), args.begin(), args.end());
  test_support::SpawnResult r = test_support::SpawnAndCapture(argv, std::chrono::seconds(120));
  EXPECT_EQ(r.code, 0) << "reference.py failed:\n" << r.output;
  return r.code == 0 ? r.output : "";
}

inline std::vector<std::string> Lines(const std::string& text) { return absl::StrSplit(text, '\n', absl::SkipEmpty()); }

// "a b c" -> numbers.
template <typename T>
std::vector<T> Numbers(const std::string& text) {
  std::istringstream in(text);
  std::vector<T> out;
  T v;
  while (in >> v) out.push_back(v);
  return out;
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// `st` is an error with `code` whose message contains every needle.
inline void ExpectError(const absl::Status& st, absl::StatusCode code, const std::vector<std::string>& needles) {
  ASSERT_FALSE(st.ok()) << "expected an error containing " << (needles.empty() ? "" : needles[0]);
  EXPECT_EQ(st.code(), code) << st;
  const std::string msg(st.message());
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}

inline BatchSpec Spec(int64_t step, int rank, int world, int64_t micro, int64_t accumulate, int64_t global_batch) {
  BatchSpec s;
  s.step = step;
  s.rank = rank;
  s.world_size = world;
  s.micro = micro;
  s.accumulate = accumulate;
  s.global_batch = global_batch;
  return s;
}

// The step's batch as every rank's micro-batches laid end to end (rank 0's
// micro 0, 1, ..., rank 1's, ...): must equal the 1-process batch.
template <typename X, typename Y>
void ConcatRanks(const Dataset& d, int64_t step, int world, int64_t accumulate, int64_t global_batch,
                 std::vector<X>* inputs, std::vector<Y>* targets) {
  for (int r = 0; r < world; ++r) {
    for (int64_t m = 0; m < accumulate; ++m) {
      absl::StatusOr<Batch> b = d.Get(Spec(step, r, world, m, accumulate, global_batch));
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_EQ(b->size(), global_batch / (world * accumulate));
      for (X v : b->inputs.ToVector<X>()) inputs->push_back(v);
      for (Y v : b->targets.ToVector<Y>()) targets->push_back(v);
    }
  }
}

}  // namespace psync::data::testing
