#include "worker/runtime/exit_codes.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/cord.h"

namespace psync::runtime {

namespace {
constexpr char kPayloadUrl[] = "psync.dev/exit-code";
}  // namespace

absl::Status WithExitCode(absl::Status status, int code) {
  status.SetPayload(kPayloadUrl, absl::Cord(std::to_string(code)));
  return status;
}

int ExitCodeOf(const absl::Status& status, int fallback) {
  absl::optional<absl::Cord> payload = status.GetPayload(kPayloadUrl);
  int code = fallback;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &code)) return fallback;
  return code;
}

}  // namespace psync::runtime
