#include "server/elastic_world.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/liveness_policy.h"  // DurationText

namespace psync::server {

std::string AsksToJoin(const v1::JoinRequest& req) {
  return absl::StrCat("rank ", req.requested_rank() >= 0 ? absl::StrCat(req.requested_rank()) : "?", " (",
                      req.hostname().substr(0, 64), ":", req.pid(), ") asks to join");
}

ElasticWorld::ElasticWorld(const JobConfig& cfg, Scheduler* scheduler, std::function<void(int64_t)> deadline)
    : cfg_(cfg), scheduler_(scheduler), deadline_(std::move(deadline)) {}

ElasticWorld::~ElasticWorld() { Disarm(); }

void ElasticWorld::Arm(int64_t generation) {
  if (!enabled()) return;
  Disarm();
  timer_ = scheduler_->RunAt(scheduler_->Now() + cfg_.rejoin_timeout, [this, generation] { deadline_(generation); });
}

void ElasticWorld::Disarm() {
  if (timer_ != 0) scheduler_->Cancel(timer_);
  timer_ = 0;
}

std::string ElasticWorld::WhyWait(const Generation& gen) const {
  const Rendezvous& rv = gen.rendezvous();
  const int n = rv.joined();
  const std::string head =
      absl::StrCat("waiting for generation ", gen.number(), ": ", n, " of ", cfg_.world_size, " ranks joined");
  if (n < cfg_.min_world_size) return absl::StrCat(head, ", --min-world-size is ", cfg_.min_world_size);
  // Why: each rank's share of the step must be whole, or the ranks would
  // not compute the full world's batch.
  if (rv.global_batch() > 0 && rv.global_batch() % n != 0) {
    return absl::StrCat(head, ", but the global batch ", rv.global_batch(), " does not split over ", n, " ranks");
  }
  return "";
}

std::unique_ptr<Generation> ElasticWorld::Shrink(const Generation& gen, std::vector<int>* old_ranks,
                                                 std::string* event) {
  const std::vector<int> missing = gen.rendezvous().MissingRanks(16);
  std::unique_ptr<Generation> smaller = gen.OfJoined(old_ranks);
  const int n = smaller->world_size();
  note_ = absl::StrCat(n, " of ", cfg_.world_size, " ranks: rank", missing.size() > 1 ? "s " : " ",
                       absl::StrJoin(missing, ","), " did not join within --rejoin-timeout (",
                       DurationText(cfg_.rejoin_timeout), ")");
  *event = absl::StrCat("elastic: generation ", gen.number(), " starts with ", note_, "; ranks renumbered 0..",
                        n - 1, " in order (were ", absl::StrJoin(*old_ranks, ","), ")");
  return smaller;
}

std::string ElasticWorld::WaitingNote() const {
  if (!enabled()) return "";
  return absl::StrCat("; after --rejoin-timeout (", DurationText(cfg_.rejoin_timeout), ") it starts with ",
                      cfg_.min_world_size, " or more");
}

std::string ElasticWorld::RegroupEnded(const Generation& gen) {
  return absl::StrCat("generation ", gen.number(), " (", gen.world_size(), " ranks) stopped after iteration ",
                      gen.plans().last_plan(), " to ", gen.plans().stop_reason());
}

void ElasticWorld::Started(const Generation& gen) {
  Disarm();
  const int n = gen.world_size();
  if (n == cfg_.world_size) {
    note_ = last_world_size_ > 0 && last_world_size_ < n
                ? absl::StrCat("all ", n, " ranks again (generation ", gen.number() - 1, " ran with ",
                               last_world_size_, ")")
                : "";
  }
  last_world_size_ = n;
}

absl::Status ElasticWorld::ScheduleRegroup(v1::JobState state, Generation& gen, const std::string& reason,
                                           EventLog& events, bool only_if_shrunk) const {
  if (!enabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", cfg_.job_id, "' is not elastic (start the coordinator with --min-world-size)"));
  }
  if (state != v1::JOB_RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", cfg_.job_id, "' is ", v1::JobState_Name(state), ", not running: nothing to regroup"));
  }
  if (only_if_shrunk && !Shrunk(gen)) {
    return absl::FailedPreconditionError(absl::StrCat("job '", cfg_.job_id, "' runs with all ", cfg_.world_size,
                                                      " ranks already: nothing to regroup"));
  }
  PlanAggregator& plans = gen.plans();
  if (plans.stop_scheduled()) return absl::OkStatus();  // the same stop serves
  // Why a stop and not an abort: every rank writes its checkpoint at the
  // same iteration, so the next generation loses no step.
  plans.ScheduleStop(absl::StrCat("regroup: ", reason), /*regroup=*/true);
  events.Append(v1::EVENT_STOPPING, -1, plans.stop_after(),
                absl::StrCat("regroup (", reason, "): every rank stops after iteration ", plans.stop_after(),
                             " and generation ", gen.number() + 1, " forms with up to ", cfg_.world_size, " ranks"));
  return absl::OkStatus();
}

}  // namespace psync::server
