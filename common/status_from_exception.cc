#include "psync/common/status_from_exception.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "psync/common/logging.h"

namespace psync {

absl::Status StatusFromException(absl::string_view where, absl::StatusCode fallback) {
  absl::StatusCode code = fallback;
  std::string what;
  try {
    throw;
  } catch (const StatusError& e) {
    code = e.code();
    what = e.what();
  } catch (const InternalError& e) {
    code = absl::StatusCode::kInternal;
    what = e.what();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown exception";
  }
  return absl::Status(code, where.empty() ? what : absl::StrCat(where, ": ", what));
}

}  // namespace psync
