// Error context for data sources: "--data /path/file: <what went wrong>".
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace psync::data {

// `st` (whose message starts with the file name) with `flag` in front and,
// when given, `context` at the end: "--data F: truncated ... (reading the labels)".
inline absl::Status WithFlag(const absl::Status& st, const std::string& flag, const std::string& context = "") {
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat(flag, " ", std::string(st.message()),
                                              context.empty() ? "" : absl::StrCat(" (", context, ")")));
}

}  // namespace psync::data
