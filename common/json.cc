#include "common/json.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"

namespace psync::json {
namespace {

// Thrown from the parser callback to stop parsing with our own message.
struct Refused {
  std::string message;
};

// nlohmann's messages start with "[json.exception.parse_error.101] "; drop it.
std::string Tail(const std::string& what) {
  const size_t close = what.find("] ");
  return close == std::string::npos ? what : what.substr(close + 2);
}

}  // namespace

absl::StatusOr<Json> Parse(absl::string_view text, const ParseOptions& options) {
  if (text.size() > options.max_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON text is ", text.size(), " bytes; the limit is ", options.max_size));
  }
  // nlohmann's lexer takes a NUL byte for the end of input, so "{}\0junk"
  // would parse; JSON text never holds a raw NUL (in strings it must be
  // escaped), so refuse it.
  if (const size_t nul = text.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON at byte ", nul + 1, ": a NUL byte (JSON text never contains one)"));
  }
  // One key set per open container (arrays get an unused one), to refuse
  // duplicate keys; the container depth bounds nesting.
  std::vector<std::set<std::string>> keys;
  auto check = [&](int depth, nlohmann::detail::parse_event_t event, Json& parsed) -> bool {
    using E = nlohmann::detail::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        if (depth >= options.max_depth) {
          throw Refused{absl::StrCat("nesting deeper than the limit of ", options.max_depth, " levels")};
        }
        keys.emplace_back();
        break;
      case E::object_end:
      case E::array_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case E::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second) {
          throw Refused{absl::StrCat("duplicate object key ", Quote(parsed.get<std::string>()))};
        }
        break;
      case E::value:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const Refused& r) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", r.message));
  } catch (const nlohmann::json::parse_error& e) {
    const std::string what = Tail(e.what());
    if (what.find("expected end of input") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid JSON at byte ", e.byte, ": trailing data after the JSON value (", what, ")"));
    }
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON at byte ", e.byte, ": ", what));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", Tail(e.what())));
  }
}

std::string Serialize(const Json& value, bool pretty) {
  return value.dump(pretty ? 2 : -1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

std::string Quote(absl::string_view s) { return Serialize(Json(std::string(s))); }

const char* TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    case Json::value_t::binary:
      return "binary";
  }
  return "?";
}

}  // namespace psync::json
