// A fresh temporary directory for one test, removed (recursively) on
// destruction.
#pragma once

#include <string>

namespace psync::test_support {

class TempDir {
 public:
  // Creates <temp_directory_path>/<prefix>_XXXXXX; throws std::runtime_error
  // when it cannot.
  explicit TempDir(const std::string& prefix = "psync_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace psync::test_support
