#include "common/atomic_file.h"

#include <dirent.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/common/temp_dir.h"

namespace psync {
namespace {

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int Entries(const std::string& dir) {
  int n = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

TEST(AtomicFile, WritesReplacesAndLeavesNoTemporaries) {
  test_support::TempDir dir("psync-atomic");
  const std::string path = dir.File("out.json");
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  EXPECT_EQ(Read(path), "first");
  ASSERT_TRUE(WriteFileAtomically(path, std::string("sec\0ond", 7)).ok());
  EXPECT_EQ(Read(path), std::string("sec\0ond", 7));
  EXPECT_EQ(Entries(dir.path()), 1);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(AtomicFile, WithoutCommitNothingChanges) {
  test_support::TempDir dir("psync-atomic");
  const std::string path = dir.File("ckpt");
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    AtomicFileWriter w;
    ASSERT_TRUE(w.Open(path).ok());
    ASSERT_TRUE(w.Append("half of the new").ok());
    EXPECT_EQ(Entries(dir.path()), 2);  // the temporary sits next to the target
    EXPECT_EQ(Read(path), "old");
  }  // dropped without Commit (e.g. an error while writing)
  EXPECT_EQ(Read(path), "old");
  EXPECT_EQ(Entries(dir.path()), 1);
}

TEST(AtomicFile, ErrorsNameTheFile) {
  auto st = WriteFileAtomically("/nonexistent-dir-psync/x.json", "v");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("/nonexistent-dir-psync/x.json"), std::string::npos) << st;
  AtomicFileWriter w;
  EXPECT_EQ(w.Append("x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(WriteFileAtomically("", "v").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace psync
