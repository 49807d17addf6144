#include "server/limits.h"

#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "psync/common/bucket_packer.h"

namespace psync::server {

int64_t ParamBytes(const v1::ParamSpec& p) {
  int64_t n = p.element_size() > 0 ? p.element_size() : 4;
  for (int64_t d : p.shape()) n *= d;
  return n;
}

absl::Status ValidateString(const char* field, const std::string& s, int max_bytes) {
  if (s.size() > static_cast<size_t>(max_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", s.size(), " bytes; the limit is ", max_bytes));
  }
  return absl::OkStatus();
}

namespace {

// JoinRequest.agree_resume / checkpoint_steps (coordinator.proto, "Resume agreement").
absl::Status ValidateCheckpointSteps(const v1::JoinRequest& req) {
  if (req.has_live_step() && (req.live_step() < 0 || req.live_step() > kMaxIteration)) {
    return absl::InvalidArgumentError(absl::StrCat("live_step is ", req.live_step(), "; expected 0..", kMaxIteration));
  }
  if (!req.agree_resume()) {
    if (req.checkpoint_steps_size() == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_steps has ", req.checkpoint_steps_size(),
                                                   " steps but agree_resume is false; list them only with it"));
  }
  if (req.start_iteration() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("start_iteration is ", req.start_iteration(),
                                                   " with agree_resume; the coordinator picks it (send 0)"));
  }
  if (req.checkpoint_steps_size() > kMaxCheckpointSteps) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_steps has ", req.checkpoint_steps_size(),
                                                   " steps; the limit is ", kMaxCheckpointSteps));
  }
  for (int64_t step : req.checkpoint_steps()) {
    if (step < 1 || step > kMaxIteration) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint_steps holds ", step, "; expected 1..", kMaxIteration));
    }
  }
  return absl::OkStatus();
}

// JoinRequest.settings: bounded, and each name once (the check at Join
// compares them by name).
absl::Status ValidateSettings(const v1::JoinRequest& req) {
  if (req.settings_size() > kMaxSettings) {
    return absl::InvalidArgumentError(
        absl::StrCat("settings has ", req.settings_size(), " entries; the limit is ", kMaxSettings));
  }
  std::set<std::string_view> names;
  for (int i = 0; i < req.settings_size(); ++i) {
    const v1::JobSetting& s = req.settings(i);
    if (s.name().empty() || s.name().size() > static_cast<size_t>(kMaxSettingNameBytes)) {
      return absl::InvalidArgumentError(absl::StrCat("settings[", i, "].name is ", s.name().size(),
                                                     " bytes; expected 1..", kMaxSettingNameBytes));
    }
    if (s.value().size() > static_cast<size_t>(kMaxSettingValueBytes)) {
      return absl::InvalidArgumentError(absl::StrCat("settings[", i, "].value is ", s.value().size(),
                                                     " bytes; the limit is ", kMaxSettingValueBytes));
    }
    if (!names.insert(s.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat("settings[", i, "].name '", s.name(), "' is repeated"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJoinRequest(const v1::JoinRequest& req) {
  for (auto [field, value] : {std::pair<const char*, const std::string*>{"hostname", &req.hostname()},
                              {"device", &req.device()},
                              {"backend", &req.backend()},
                              {"job_id", &req.job_id()}}) {
    absl::Status st = ValidateString(field, *value, kMaxStringBytes);
    if (!st.ok()) return st;
  }
  if (req.host_id().size() > static_cast<size_t>(kMaxHostIdBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("host_id is ", req.host_id().size(), " bytes; the limit is ", kMaxHostIdBytes));
  }
  for (size_t i = 0; i < req.host_id().size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(req.host_id()[i]);
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host_id has byte 0x", absl::Hex(c, absl::kZeroPad2), " at offset ", i,
          "; only printable ASCII without spaces (0x21..0x7e) is allowed (set PSYNC_HOST_ID accordingly)"));
    }
  }
  if (req.requested_rank() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("requested_rank is ", req.requested_rank(), "; use -1 for any rank or 0..W-1"));
  }
  if (req.start_iteration() < 0 || req.start_iteration() > kMaxIteration) {
    return absl::InvalidArgumentError(
        absl::StrCat("start_iteration is ", req.start_iteration(), "; expected 0..", kMaxIteration));
  }
  if (absl::Status st = ValidateCheckpointSteps(req); !st.ok()) return st;
  if (absl::Status st = ValidateSettings(req); !st.ok()) return st;
  if (req.generation() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("generation is ", req.generation(), "; use 0 for the one being formed, or 1, 2, ..."));
  }
  if (req.world_size() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("world_size is ", req.world_size(), "; must be >= 0"));
  }
  // The worker's requested --backend (auto resolves on the workers, the
  // same way on every rank).
  if (req.backend() != "gloo" && req.backend() != "nccl" && req.backend() != "shm" && req.backend() != "hier" &&
      req.backend() != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend is '", req.backend(), "'; expected auto, gloo, shm, hier or nccl"));
  }
  if (req.manifest_size() == 0 || req.manifest_size() > kMaxParams) {
    return absl::InvalidArgumentError(absl::StrCat("manifest has ", req.manifest_size(),
                                                   " parameters; expected 1..", kMaxParams));
  }
  // The caps' one range check is the workers' (include/psync/common/bucket_packer.h); the
  // wire's fields are signed, so a negative one is named as sent.
  if (req.bucket_cap_bytes() < 0 || req.first_bucket_cap_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("bucket caps are ", req.bucket_cap_bytes(), " / first ",
                                                   req.first_bucket_cap_bytes(), " bytes; expected positive sizes"));
  }
  const BucketCaps caps{static_cast<size_t>(req.first_bucket_cap_bytes()), static_cast<size_t>(req.bucket_cap_bytes())};
  if (absl::Status st = caps.Validate(); !st.ok()) return st;
  for (int i = 0; i < req.manifest_size(); ++i) {
    const v1::ParamSpec& p = req.manifest(i);
    if (p.name().empty() || p.name().size() > static_cast<size_t>(kMaxNameBytes)) {
      return absl::InvalidArgumentError(absl::StrCat("manifest[", i, "].name is ", p.name().size(),
                                                     " bytes; expected 1..", kMaxNameBytes));
    }
    if (p.shape_size() > kMaxShapeRank) {
      return absl::InvalidArgumentError(absl::StrCat("manifest[", i, "] ('", p.name(), "') has rank ",
                                                     p.shape_size(), "; the limit is ", kMaxShapeRank));
    }
    if (p.element_size() < 0 || p.element_size() > 16) {
      return absl::InvalidArgumentError(absl::StrCat("manifest[", i, "] ('", p.name(),
                                                     "') element_size is ", p.element_size(),
                                                     "; expected 0..16"));
    }
    int64_t n = 1;
    for (int64_t d : p.shape()) {
      if (d < 0 || d > (int64_t{1} << 40) || (d > 0 && n > (int64_t{1} << 44) / d)) {
        return absl::InvalidArgumentError(absl::StrCat("manifest[", i, "] ('", p.name(),
                                                       "') has an invalid or too large shape"));
      }
      n *= d;
    }
  }
  return absl::OkStatus();
}

}  // namespace psync::server
