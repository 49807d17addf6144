#include "worker/checkpoint/manifest.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json.h"
#include "psync/common/status_macros.h"
#include "worker/checkpoint/model_config.h"
#include "worker/checkpoint/format.h"

namespace psync::checkpoint {
namespace {

constexpr char kFormatVersionKey[] = "format_version";
constexpr char kStep[] = "step";
constexpr const char* kModel = kModelKindKey;
constexpr char kOptimizer[] = "optimizer";
constexpr char kWorldSize[] = "world_size";
constexpr char kBucketPlan[] = "bucket_plan";
constexpr char kPsyncVersion[] = "psync_version";
// Prefixes of the map-valued fields.
constexpr absl::string_view kModelPrefix = kModelConfigPrefix;
constexpr absl::string_view kDataPrefix = "data.";
constexpr absl::string_view kRngPrefix = "rng.";

bool ValidMapKey(absl::string_view key) {
  if (key.empty()) return false;
  for (char c : key) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

absl::Status CheckMapKey(absl::string_view field, absl::string_view key) {
  if (ValidMapKey(key)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("checkpoint manifest: ", field, " key ", json::Quote(key),
                                                 " must be non-empty and use only [A-Za-z0-9_.-]"));
}

absl::Status CheckBucketPlan(const std::string& text) {
  if (text.empty()) return absl::OkStatus();
  return json::Parse(text).status();
}

// Canonical decimal: what StrCat would print for the parsed value.
template <typename Int>
bool ParseCanonical(absl::string_view text, Int* out) {
  return absl::SimpleAtoi(text, out) && absl::StrCat(*out) == text;
}

// Reading one checkpoint's metadata; every error names the file and the key.
class MetadataReader {
 public:
  MetadataReader(const Metadata& metadata, const std::string& source) : md_(metadata), source_(source) {}

  absl::Status Error(absl::string_view key, absl::string_view problem) const {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", source_, ": metadata ", json::Quote(key), " ", problem));
  }

  absl::StatusOr<std::string> String(const std::string& key) const {
    auto it = md_.find(key);
    if (it == md_.end()) return Error(key, "is missing (not a complete psync checkpoint)");
    return it->second;
  }

  template <typename Int>
  absl::StatusOr<Int> Integer(const std::string& key, Int min) const {
    PSYNC_ASSIGN_OR_RETURN(std::string text, String(key));
    Int v = 0;
    if (!ParseCanonical(text, &v) || v < min) {
      return Error(key, absl::StrCat("is ", json::Quote(text), ", expected an integer >= ", min));
    }
    return v;
  }

 private:
  const Metadata& md_;
  const std::string& source_;
};

}  // namespace

absl::StatusOr<Metadata> EncodeManifest(const CheckpointManifest& m) {
  auto bad = [](absl::string_view problem) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint manifest: ", problem));
  };
  if (m.step < 0) return bad(absl::StrCat("step is ", m.step, ", expected >= 0"));
  if (m.world_size < 1) return bad(absl::StrCat("world_size is ", m.world_size, ", expected >= 1"));
  if (m.model.empty()) return bad("model (the --model kind) is empty");
  if (absl::Status st = CheckBucketPlan(m.bucket_plan); !st.ok()) {
    return bad(absl::StrCat("bucket_plan is not JSON: ", st.message()));
  }
  Metadata md;
  md[kFormatKey] = kFormatName;
  md[kFormatVersionKey] = absl::StrCat(kFormatVersion);
  md[kStep] = absl::StrCat(m.step);
  md[kModel] = m.model;
  md[kOptimizer] = m.optimizer;
  md[kWorldSize] = absl::StrCat(m.world_size);
  md[kBucketPlan] = m.bucket_plan;
  md[kPsyncVersion] = m.psync_version;
  for (const auto& [k, v] : m.model_config) {
    PSYNC_RETURN_IF_ERROR(CheckMapKey("model_config", k));
    md[absl::StrCat(kModelPrefix, k)] = v;
  }
  for (const auto& [k, v] : m.data_position) {
    PSYNC_RETURN_IF_ERROR(CheckMapKey("data_position", k));
    md[absl::StrCat(kDataPrefix, k)] = absl::StrCat(v);
  }
  for (const auto& [k, words] : m.rng) {
    PSYNC_RETURN_IF_ERROR(CheckMapKey("rng", k));
    md[absl::StrCat(kRngPrefix, k)] = absl::StrJoin(words, ",");
  }
  return md;
}

absl::StatusOr<CheckpointManifest> DecodeManifest(const Metadata& md, const std::string& source) {
  MetadataReader r(md, source);
  PSYNC_ASSIGN_OR_RETURN(std::string format, r.String(kFormatKey));
  if (format != kFormatName) {
    return r.Error(kFormatKey, absl::StrCat("is ", json::Quote(format), ", expected \"", kFormatName, "\""));
  }
  PSYNC_ASSIGN_OR_RETURN(int64_t version, r.Integer<int64_t>(kFormatVersionKey, 1));
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", source, " has format_version ", version, "; this psync reads version ", kFormatVersion,
        version > kFormatVersion ? " (the file was written by a newer psync)" : ""));
  }

  CheckpointManifest m;
  PSYNC_ASSIGN_OR_RETURN(m.step, r.Integer<int64_t>(kStep, 0));
  PSYNC_ASSIGN_OR_RETURN(m.world_size, r.Integer<int64_t>(kWorldSize, 1));
  PSYNC_ASSIGN_OR_RETURN(m.model, r.String(kModel));
  if (m.model.empty()) return r.Error(kModel, "is empty");
  PSYNC_ASSIGN_OR_RETURN(m.optimizer, r.String(kOptimizer));
  PSYNC_ASSIGN_OR_RETURN(m.bucket_plan, r.String(kBucketPlan));
  if (absl::Status st = CheckBucketPlan(m.bucket_plan); !st.ok()) {
    return r.Error(kBucketPlan, absl::StrCat("is not JSON: ", st.message()));
  }
  PSYNC_ASSIGN_OR_RETURN(m.psync_version, r.String(kPsyncVersion));

  // The map-valued fields: "<prefix><key>" with a well-formed key.
  auto sub_key = [](absl::string_view key, absl::string_view prefix) -> std::optional<std::string> {
    if (!absl::StartsWith(key, prefix) || !ValidMapKey(key.substr(prefix.size()))) return std::nullopt;
    return std::string(key.substr(prefix.size()));
  };
  for (const auto& [key, value] : md) {
    if (key == kFormatKey || key == kFormatVersionKey || key == kStep || key == kModel || key == kOptimizer ||
        key == kWorldSize || key == kBucketPlan || key == kPsyncVersion || key == kChecksumKey) {
      continue;
    }
    if (auto k = sub_key(key, kModelPrefix)) {
      m.model_config[*k] = value;
    } else if (auto k = sub_key(key, kDataPrefix)) {
      int64_t v = 0;
      if (!ParseCanonical(value, &v)) return r.Error(key, absl::StrCat("is ", json::Quote(value), ", expected an int64"));
      m.data_position[*k] = v;
    } else if (auto k = sub_key(key, kRngPrefix)) {
      std::vector<uint64_t> words;
      if (!value.empty()) {
        for (absl::string_view w : absl::StrSplit(value, ',')) {
          uint64_t x = 0;
          if (!ParseCanonical(w, &x)) {
            return r.Error(key, absl::StrCat("has ", json::Quote(w), ", expected uint64 words joined by \",\""));
          }
          words.push_back(x);
        }
      }
      m.rng[*k] = std::move(words);
    } else {
      return r.Error(key, "is not a key this psync knows (a newer writer, or a corrupt file)");
    }
  }
  return m;
}

}  // namespace psync::checkpoint
