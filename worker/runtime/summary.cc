#include "worker/runtime/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/json.h"

namespace psync::runtime {

std::string RunSummary::ToJson() const {
  auto num = [](double v) -> json::Json {
    if (!std::isfinite(v)) return nullptr;
    return v;
  };
  json::Json o = json::Json::object();
  o["rank"] = rank;
  o["world_size"] = world_size;
  o["steps_requested"] = steps_requested;
  o["steps_completed"] = steps_completed;
  o["final_loss"] = num(final_loss);
  o["val_loss"] = num(val_loss);
  o["val_accuracy"] = num(val_accuracy);
  o["items_per_s"] = num(items_per_s);
  o["model"] = model;
  o["data"] = data;
  o["median_step_ms"] = num(median_step_ms());
  o["p90_step_ms"] = num(p90_step_ms());
  o["timed_steps"] = step_ms.timed();
  o["exit_reason"] = exit_reason;
  o["exit_code"] = exit_code;
  o["backend"] = backend;
  o["device"] = device;
  o["total_s"] = num(total_s);
  if (optimizer_state_bytes >= 0) o["optimizer_state_bytes"] = optimizer_state_bytes;
  if (gradient_bytes >= 0) o["gradient_bytes"] = gradient_bytes;
  if (parameter_bytes >= 0) o["parameter_bytes"] = parameter_bytes;
  if (parameter_window_bytes >= 0) o["parameter_window_bytes"] = parameter_window_bytes;
  if (peak_device_bytes >= 0) o["peak_device_bytes"] = peak_device_bytes;
  if (activation_bytes >= 0) o["activation_bytes"] = activation_bytes;
  return json::Serialize(o, /*pretty=*/true) + "\n";
}

absl::Status RunSummary::WriteJson(const std::string& path) const {
  absl::Status st = WriteFileAtomically(path, ToJson());
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("--summary: ", st.message()));
  return absl::OkStatus();
}

}  // namespace psync::runtime
