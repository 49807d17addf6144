// Helpers for absl::Status / absl::StatusOr plumbing.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

#define PSYNC_STATUS_CONCAT_INNER(a, b) a##b
#define PSYNC_STATUS_CONCAT(a, b) PSYNC_STATUS_CONCAT_INNER(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define PSYNC_RETURN_IF_ERROR(expr)              \
  do {                                           \
    ::absl::Status _psync_st = (expr);           \
    if (!_psync_st.ok()) return _psync_st;       \
  } while (0)

// PSYNC_ASSIGN_OR_RETURN(auto x, MaybeX()); declares x or returns the error.
#define PSYNC_ASSIGN_OR_RETURN(lhs, expr) \
  PSYNC_ASSIGN_OR_RETURN_IMPL(PSYNC_STATUS_CONCAT(_psync_sor_, __LINE__), lhs, expr)
#define PSYNC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(*tmp)

namespace psync {

// Prefixes a status message with context, keeping the code and the payloads
// (an exit code, include/psync/common/exit_code.h):
//   return Annotate(st, "reading --init /x.safetensors");
inline absl::Status Annotate(const absl::Status& st, const std::string& context) {
  if (st.ok()) return st;
  absl::Status out(st.code(), absl::StrCat(context, ": ", std::string(st.message())));
  st.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

inline std::string ToString(const absl::Status& st) { return st.ToString(); }

}  // namespace psync
