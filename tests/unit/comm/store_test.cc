#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <thread>

#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "worker/comm/file_store.h"
#include "worker/comm/hash_store.h"
#include "worker/comm/prefix_store.h"

namespace psync::comm {
namespace {

using std::chrono::milliseconds;
using test_support::ExpectAllRanksOk;
using test_support::RunRanks;
using test_support::TempDir;

std::string Msg(const absl::Status& st) { return std::string(st.message()); }

// Exercises any store: set/get/overwrite/wait and timeouts naming keys.
void CheckBasics(Store& s) {
  ASSERT_TRUE(s.Set("a", "1").ok());
  auto v = s.Get("a", milliseconds(100));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "1");
  ASSERT_TRUE(s.Set("a", "two").ok());  // overwrite
  EXPECT_EQ(*s.Get("a", milliseconds(100)), "two");
  ASSERT_TRUE(s.Set("bin", std::string("x\0y\n", 4)).ok());  // binary values
  EXPECT_EQ(*s.Get("bin", milliseconds(100)), std::string("x\0y\n", 4));
  ASSERT_TRUE(s.Set("empty", "").ok());
  EXPECT_EQ(*s.Get("empty", milliseconds(100)), "");

  const auto t0 = std::chrono::steady_clock::now();
  auto missing = s.Get("nope", milliseconds(150));
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(Msg(missing.status()).find("nope"), std::string::npos) << missing.status();
  EXPECT_GE(elapsed, milliseconds(140));
  EXPECT_LT(elapsed, milliseconds(2000));

  EXPECT_TRUE(s.Wait({"a", "bin"}, milliseconds(100)).ok());
  absl::Status w = s.Wait({"a", "missing-1", "missing-2"}, milliseconds(100));
  EXPECT_EQ(w.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(Msg(w).find("missing-1"), std::string::npos) << w;
  EXPECT_NE(Msg(w).find("missing-2"), std::string::npos) << w;

  // Get blocks until another thread sets the key: it has not returned while
  // the key is missing, and returns the value once it is set.
  auto late = std::async(std::launch::async, [&] { return s.Get("late", milliseconds(5000)); });
  EXPECT_EQ(late.wait_for(milliseconds(20)), std::future_status::timeout) << "Get returned before the key was set";
  ASSERT_TRUE(s.Set("late", "here").ok());
  auto got = late.get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "here");
}

TEST(HashStore, Basics) {
  HashStore s;
  CheckBasics(s);
  EXPECT_TRUE(s.Contains("a"));
}

TEST(FileStore, Basics) {
  TempDir dir;
  FileStore s(dir.path() + "/sub/dir");  // created when missing
  ASSERT_TRUE(s.status().ok()) << s.status();
  CheckBasics(s);
  // Odd keys map to single files inside the directory.
  ASSERT_TRUE(s.Set("x/../y z\t%", "v").ok());
  EXPECT_EQ(*s.Get("x/../y z\t%", milliseconds(10)), "v");
  EXPECT_EQ(std::filesystem::path(s.PathFor("x/../y z\t%")).parent_path().string(), dir.path() + "/sub/dir");
  ASSERT_TRUE(s.Set(".hidden", "h").ok());
  EXPECT_EQ(*s.Get(".hidden", milliseconds(10)), "h");
}

TEST(FileStore, OpenFailsOnAFile) {
  TempDir dir;
  std::string file = dir.path() + "/f";
  { FILE* f = std::fopen(file.c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  auto s = FileStore::Open(file + "/sub");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_NE(Msg(s.status()).find("cannot create directory '" + file + "/sub'"), std::string::npos) << s.status();
}

TEST(PrefixStore, Basics) {
  auto inner = std::make_shared<HashStore>();
  PrefixStore s("job7", inner);
  CheckBasics(s);
  EXPECT_TRUE(inner->Contains("job7/a"));
  EXPECT_FALSE(inner->Contains("a"));
  auto miss = s.Get("zzz", milliseconds(20));
  EXPECT_EQ(miss.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(Msg(miss.status()).find("job7/zzz"), std::string::npos) << miss.status();
}

// A store implementing only Set/Get: exercises Store::Wait's default.
class MinimalStore : public Store {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override { return inner_.Set(key, value); }
  absl::StatusOr<std::string> Get(const std::string& key, milliseconds timeout) override {
    return inner_.Get(key, timeout);
  }

 private:
  HashStore inner_;
};

TEST(Store, DefaultWait) {
  MinimalStore s;
  ASSERT_TRUE(s.Set("k1", "v").ok());
  EXPECT_TRUE(s.Wait({"k1"}, milliseconds(50)).ok());
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status w = s.Wait({"k1", "k2", "k3"}, milliseconds(100));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
  EXPECT_EQ(w.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(Msg(w).find("k2"), std::string::npos) << w;
  EXPECT_NE(Msg(w).find("k3"), std::string::npos) << w;
  EXPECT_EQ(Msg(w).find("'k1'"), std::string::npos) << w;
}

// Two real processes exchange keys through one directory.
TEST(FileStore, AcrossProcesses) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  auto results = RunRanks(
      3,
      [&](int rank) -> int {
        FileStore s(path);
        CHILD_CHECK(rank, s.status().ok(), s.status().ToString());
        // Stagger the writers so readers really wait.
        std::this_thread::sleep_for(milliseconds(30 * rank));
        const std::string big(1 << 20, static_cast<char>('a' + rank));  // 1 MiB: must never be seen partially
        CHILD_CHECK(rank, s.Set("rank" + std::to_string(rank), big).ok(), "set");
        for (int r = 0; r < 3; ++r) {
          auto v = s.Get("rank" + std::to_string(r), milliseconds(10000));
          CHILD_CHECK(rank, v.ok(), v.status().ToString());
          CHILD_CHECK(rank, *v == std::string(1 << 20, static_cast<char>('a' + r)), "value of rank " + std::to_string(r));
        }
        CHILD_CHECK(rank, s.Wait({"rank0", "rank1", "rank2"}, milliseconds(1000)).ok(), "wait");
        return 0;
      },
      std::chrono::seconds(30));
  ExpectAllRanksOk(results);
}

}  // namespace
}  // namespace psync::comm
