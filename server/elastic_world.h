// ElasticWorld: the elastic-world-size rules of one job (coordinator.proto,
// "Elastic world size"; JobConfig::min_world_size < world_size): the rejoin
// clock of a waiting generation, whether it may start with the ranks it has,
// the smaller generation it then becomes, whether a regroup may be asked
// for, and the note that tells psyncctl status why the world has its size.
//
// Part of JobState: no lock of its own (JobState's guards it); the rejoin
// clock's callback runs on the scheduler's thread and must take that lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/scheduler.h"
#include "psync/v1/control.pb.h"
#include "server/event_log.h"
#include "server/generation.h"
#include "server/job_config.h"

namespace psync::server {

// "rank 2 (host:42) asks to join": the reason of a regroup a Join asked for.
std::string AsksToJoin(const v1::JoinRequest& req);

class ElasticWorld {
 public:
  // `cfg` and `scheduler` must outlive this. `deadline(generation)` runs on
  // the scheduler's thread when that generation's rejoin clock runs out.
  ElasticWorld(const JobConfig& cfg, Scheduler* scheduler, std::function<void(int64_t)> deadline);
  ~ElasticWorld();  // cancels the rejoin clock
  ElasticWorld(const ElasticWorld&) = delete;
  ElasticWorld& operator=(const ElasticWorld&) = delete;

  bool enabled() const { return cfg_.Elastic(); }
  // A generation of `gen`'s size runs without some of the job's ranks.
  bool Shrunk(const Generation& gen) const { return enabled() && gen.world_size() < cfg_.world_size; }

  // Starts (or restarts) the rejoin clock of `generation`: the deadline
  // runs after --rejoin-timeout unless Disarm comes first. Does nothing when
  // not elastic.
  void Arm(int64_t generation);
  void Disarm();
  bool armed() const { return timer_ != 0; }

  // Why the waiting `gen` (its rejoin timeout passed) cannot start with the
  // ranks that joined it ("" = it can): fewer than --min-world-size, or a
  // number that does not split the global batch.
  std::string WhyWait(const Generation& gen) const;
  // `gen`'s joined ranks as the generation to start, renumbered 0..n-1 in
  // order (Generation::OfJoined; `old_ranks[i]` was new rank i's number);
  // the note names the ranks that did not come. `event` gets the event
  // log's line.
  std::unique_ptr<Generation> Shrink(const Generation& gen, std::vector<int>* old_ranks, std::string* event);
  // A generation of `gen`'s world size starts: the note says so when the
  // full world is back after a smaller one.
  void Started(const Generation& gen);
  // "; after --rejoin-timeout (30s) it starts with 2 or more" for the status
  // reason of a waiting generation ("" when not elastic).
  std::string WaitingNote() const;
  // "generation 3 (2 ranks) stopped after iteration 99 to regroup: ...":
  // how `gen` ended, once every rank is done after its regroup stop.
  static std::string RegroupEnded(const Generation& gen);
  // Why status shows the current world's size ("" = nothing to say).
  const std::string& note() const { return note_; }
  int last_world_size() const { return last_world_size_; }
  // Continues from what an earlier coordinator of the job knew (server/job_journal.h).
  void Restore(std::string note, int last_world_size) { note_ = std::move(note), last_world_size_ = last_world_size; }

  // Schedules a regroup stop in `gen`'s plans (PlanAggregator::ScheduleStop
  // with regroup; OK and nothing new when a stop is scheduled already) and
  // logs it in `events`. FailedPrecondition saying why not when the job is
  // not elastic or not RUNNING (`state`), or with `only_if_shrunk` (a Join
  // that came) when its world is full. A full world may regroup when asked:
  // a node that leaves (psync-launch on SIGTERM) stops every rank at a
  // checkpoint, and the next generation goes on without it.
  absl::Status ScheduleRegroup(v1::JobState state, Generation& gen, const std::string& reason, EventLog& events,
                               bool only_if_shrunk = false) const;

 private:
  const JobConfig& cfg_;
  Scheduler* const scheduler_;
  const std::function<void(int64_t)> deadline_;
  uint64_t timer_ = 0;
  std::string note_;
  int last_world_size_ = 0;  // the previous generation's
};

}  // namespace psync::server
