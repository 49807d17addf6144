#include "worker/runtime/test_kill.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "psync/common/logging.h"

namespace psync::runtime::test_kill {
namespace {

struct Kill {
  std::string phase;
  int64_t iteration = -1;
  std::string marker;
};

// PSYNC_TEST_KILL, parsed once; malformed entries are skipped with a warning.
const std::vector<Kill>& Kills() {
  static const std::vector<Kill> kills = [] {
    std::vector<Kill> out;
    const char* v = std::getenv("PSYNC_TEST_KILL");
    if (v == nullptr) return out;
    for (absl::string_view entry : absl::StrSplit(v, ',', absl::SkipEmpty())) {
      const std::vector<std::string> parts = absl::StrSplit(entry, '@');
      Kill k;
      if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &k.iteration) || parts[2].empty()) {
        PSYNC_LOG(WARNING) << "PSYNC_TEST_KILL: ignoring '" << entry << "' (want PHASE@ITERATION@MARKER)";
        continue;
      }
      k.phase = parts[0];
      k.marker = parts[2];
      out.push_back(std::move(k));
    }
    if (!out.empty()) PSYNC_LOG(WARNING) << "test hook PSYNC_TEST_KILL=" << v << " is set";
    return out;
  }();
  return kills;
}

std::atomic<int64_t> current{-1};

bool Names(absl::string_view phase) {
  for (const Kill& k : Kills()) {
    if (k.phase == phase) return true;
  }
  return false;
}

class KillingHook : public ddp::CommHook {
 public:
  explicit KillingHook(std::shared_ptr<ddp::CommHook> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::shared_ptr<comm::Work> Run(comm::ProcessGroup& group, const ddp::GradBucket& bucket) override {
    std::shared_ptr<comm::Work> work = inner_->Run(group, bucket);
    if (bucket.index == 0) At("allreduce");  // the reduction is in flight
    return work;
  }
  bool CarriesStepTag() const override { return inner_->CarriesStepTag(); }

 private:
  const std::shared_ptr<ddp::CommHook> inner_;
};

}  // namespace

void SetIteration(int64_t iteration) { current.store(iteration); }

void At(absl::string_view phase) {
  const int64_t it = current.load();
  for (const Kill& k : Kills()) {
    if (k.phase != phase || k.iteration != it) continue;
    const int fd = ::open(k.marker.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) continue;  // another process took this one
    const std::string pid = absl::StrCat(::getpid(), "\n");
    (void)!::write(fd, pid.data(), pid.size());
    ::close(fd);
    std::fprintf(stderr, "test hook PSYNC_TEST_KILL: pid %d killed at %s of iteration %lld\n", ::getpid(),
                 std::string(phase).c_str(), static_cast<long long>(it));
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
  }
}

std::shared_ptr<ddp::CommHook> Wrap(std::shared_ptr<ddp::CommHook> hook) {
  if (!Names("allreduce")) return hook;
  return std::make_shared<KillingHook>(hook ? std::move(hook) : ddp::AllreduceHook());
}

}  // namespace psync::runtime::test_kill
