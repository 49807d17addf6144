#include "psync/common/exit_code.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/types/optional.h"

namespace psync {

namespace {
constexpr char kPayloadUrl[] = "psync.dev/exit-code";
}  // namespace

absl::Status WithExitCode(absl::Status status, int code) {
  status.SetPayload(kPayloadUrl, absl::Cord(std::to_string(code)));
  return status;
}

std::optional<int> ExitCodeIn(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kPayloadUrl);
  int code = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &code)) return std::nullopt;
  return code;
}

int ExitCodeOf(const absl::Status& status, int fallback) { return ExitCodeIn(status).value_or(fallback); }

}  // namespace psync
