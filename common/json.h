// JSON for psync: nlohmann::json (Debian's nlohmann-json3-dev) plus the few
// things it lacks for untrusted input (safetensors headers):
//
//   PSYNC_ASSIGN_OR_RETURN(json::Json v, json::Parse(text));   // strict, bounded, absl::Status errors
//   if (v.contains("shape") && v["shape"].is_array()) ...
//   json::Json out = json::Json::object();  out["rank"] = 1;
//   std::string s = json::Serialize(out, /*pretty=*/true);
//
// Parse is strict RFC 8259 (nlohmann's parser: no comments, trailing commas,
// leading zeros, NaN/Infinity; valid UTF-8 only) and additionally refuses
// duplicate object keys and nesting deeper than max_depth, and input over
// max_size. Errors are InvalidArgument naming the byte offset. Json keeps
// object keys in insertion order (nlohmann::ordered_json), so written files
// read in the order they were built. Serialize writes non-finite doubles as
// null and replaces invalid UTF-8 instead of throwing.
//
// Threads: no shared state; a Json value has no internal synchronization.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync::json {

using Json = nlohmann::ordered_json;

struct ParseOptions {
  size_t max_size = size_t{256} << 20;
  int max_depth = 64;
};

// Exactly one JSON value (surrounded by optional whitespace).
absl::StatusOr<Json> Parse(absl::string_view text, const ParseOptions& options = {});

// Compact (one line) or pretty (2-space indent).
std::string Serialize(const Json& value, bool pretty = false);

// `s` as a JSON string literal, quotes included.
std::string Quote(absl::string_view s);

// "null", "boolean", "number", "string", "array", "object" (for messages).
const char* TypeName(const Json& value);

}  // namespace psync::json
