#include "client/launch/coordinator_view.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "psync/common/status_macros.h"

namespace psync::launch {
namespace {

// A proto JSON integer: a number, or a string for 64-bit fields; absent = 0.
absl::StatusOr<int64_t> IntField(const json::Json& v, const char* key) {
  if (!v.contains(key)) return 0;
  const json::Json& f = v[key];
  int64_t out = 0;
  if (f.is_number_integer()) return f.get<int64_t>();
  if (f.is_string() && absl::SimpleAtoi(f.get<std::string>(), &out)) return out;
  return absl::InvalidArgumentError(absl::StrCat("status field '", key, "' is ", json::TypeName(f), ", not an integer"));
}

std::string StringField(const json::Json& v, const char* key) {
  return v.contains(key) && v[key].is_string() ? v[key].get<std::string>() : std::string();
}

}  // namespace

absl::StatusOr<CoordinatorView> ParseStatusJson(absl::string_view text) {
  PSYNC_ASSIGN_OR_RETURN(json::Json v, json::Parse(text));
  if (!v.is_object() || !v.contains("state")) {
    return absl::InvalidArgumentError("psyncctl status printed no job state");
  }
  CoordinatorView out;
  out.job_id = StringField(v, "job_id");
  out.state = StringField(v, "state");
  out.reason = StringField(v, "reason");
  out.last_restart_reason = StringField(v, "last_restart_reason");
  PSYNC_ASSIGN_OR_RETURN(out.generation, IntField(v, "generation"));
  PSYNC_ASSIGN_OR_RETURN(int64_t restarts, IntField(v, "restarts"));
  PSYNC_ASSIGN_OR_RETURN(int64_t max_restarts, IntField(v, "max_restarts"));
  PSYNC_ASSIGN_OR_RETURN(int64_t world, IntField(v, "world_size"));
  out.restarts = static_cast<int>(restarts);
  out.max_restarts = static_cast<int>(max_restarts);
  out.world_size = static_cast<int>(world);
  PSYNC_ASSIGN_OR_RETURN(int64_t max_world, IntField(v, "max_world_size"));
  PSYNC_ASSIGN_OR_RETURN(int64_t min_world, IntField(v, "min_world_size"));
  out.max_world_size = static_cast<int>(max_world);
  out.min_world_size = static_cast<int>(min_world);
  out.world_change_reason = StringField(v, "world_change_reason");
  out.instance_id = StringField(v, "instance_id");
  return out;
}

Judgement Judge(const CoordinatorView& v, int64_t generation_seen, bool local_failure,
                const std::string& instance_seen) {
  if (!instance_seen.empty() && !v.instance_id.empty() && v.instance_id != instance_seen) {
    // The workers' streams ended with the old coordinator: they ride
    // through and re-register with this one (coordinator failover), or fail
    // on their own (exit 5), and that failure is what this answers. Why not
    // restart into the new one: its generations count from 1 again, so
    // nothing says whether it serves the same job or from which checkpoint.
    // Without a failure here, its view counts as any (its job may finish);
    // one that met no job yet may still rebuild it from the workers that
    // ride through (the grace bounds the wait).
    if (local_failure && v.state == "JOB_WAITING" && v.generation == 1) return {Verdict::kGoOn, ""};
    if (local_failure) {
      return {Verdict::kNoRestart,
              absl::StrCat("a new coordinator answers (instance ", v.instance_id, ", not ", instance_seen,
                           ", which this node's workers joined): the job they ran ended with the old one; its "
                           "generation ", v.generation, " is ", v.state.substr(v.state.rfind('_') + 1),
                           " (start the nodes again to join it)")};
    }
  }
  if (v.generation > generation_seen) {
    // A restart (a loss) counts; an elastic regroup does not.
    return {Verdict::kRestart,
            absl::StrCat("the coordinator opened generation ", v.generation, " (",
                         v.restarts > 0 ? absl::StrCat("restart ", v.restarts, " of ", v.max_restarts, "; ") : "",
                         v.last_restart_reason.empty() ? "" : v.last_restart_reason, ")")};
  }
  if (v.Over()) {
    return {Verdict::kNoRestart, absl::StrCat("the job is ", v.state.substr(v.state.rfind('_') + 1),
                                              v.reason.empty() ? "" : ": ", v.reason)};
  }
  if (local_failure && v.state == "JOB_WAITING") {
    return {Verdict::kNoRestart,
            absl::StrCat("the coordinator still waits for the world of generation ", v.generation,
                         ", so no generation ended and none follows")};
  }
  return {Verdict::kGoOn, ""};
}

}  // namespace psync::launch
