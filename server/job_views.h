// The read-only Control views of a job (Status, Workers, Buckets, Unused):
// JobState::Fill* and Generation::Fill* (the current generation's part) are
// defined in job_views.cc, under JobState's lock; nothing here changes the
// job. The slowest-vs-median summary `psyncctl status` shows is
// step_stats.h's.
#pragma once

#include <vector>

#include "psync/v1/control.pb.h"
#include "server/job_state.h"
#include "server/step_stats.h"

namespace psync::server {

// WorkerInfo.train_stream of every rank: the open Train streams numbered
// 1.. by their lowest rank (ranks on one host stream share one), 0 = none.
std::vector<int> TrainStreamNumbers(const std::vector<RankRuntime>& ranks);

void FillWorkerInfo(int rank, const MemberIdentity& id, const RankRuntime& rt, int train_stream,
                    v1::WorkerInfo* out);

}  // namespace psync::server
