// JobJournal: the part of JobState a coordinator's durable journal keeps
// (--state-dir; journal.h, journal.proto): the snapshot it writes and the
// restore a coordinator started again on the same state dir does before it
// serves. JobState's friend (like JobViews and JobResume), so the state
// machine's class keeps its transitions small.
//
// What the journal gives a coordinator started again: the restart count, a
// shutdown asked for that no plan carried yet (applied again once the
// workers resume), a job that ended stays ended, the event log (with its
// seq, so `psyncctl watch` goes on where it was), the elastic world's note
// and the /metrics counters. Everything else comes from the workers
// (JobResume).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "psync/v1/journal.pb.h"
#include "server/job_state.h"

namespace psync::server {

struct JobJournal {
  // What the journal keeps of `j` now (takes its lock; O(world size + the
  // events kept)).
  static v1::JournalState Snapshot(const JobState& j);
  // Before serving: `j`, a coordinator started on `dir`, takes over what
  // the previous coordinator there kept (`prev`).
  static void Restore(JobState& j, const v1::JournalState& prev, const std::string& dir);
  // With a state dir: `newer_epoch` (Journal::NewerEpoch, > 0 = this
  // coordinator was replaced) is asked before any plan goes out and at every
  // liveness tick; a newer epoch runs the fenced hook (JobResume) instead.
  // Without one (the default), coordinator_restarts of a coordinator that
  // adopts a running job is unknown (-1). Set before serving.
  static void SetLeaseCheck(JobState& j, std::function<int64_t()> newer_epoch);
};

}  // namespace psync::server
