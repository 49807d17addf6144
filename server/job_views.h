// The read-only Control views of a job (Status, Workers, Buckets, Unused):
// JobState::Fill* and Generation::Fill* (the current generation's part) are
// defined in job_views.cc, under JobState's lock; nothing here changes the
// job. StepStats is the slowest-vs-median summary shown by `psyncctl status`.
#pragma once

#include <vector>

#include "psync/v1/control.pb.h"
#include "server/job_state.h"

namespace psync::server {

struct StepStats {
  int slowest_rank = -1;  // -1 = no step times yet
  double slowest_ms = 0, median_ms = 0, slowest_vs_median_pct = 0;
};
// `step_ms[r]` = rank r's last step time (<= 0: none yet).
StepStats ComputeStepStats(const std::vector<double>& step_ms);

// WorkerInfo.train_stream of every rank: the open Train streams numbered
// 1.. by their lowest rank (ranks on one host stream share one), 0 = none.
std::vector<int> TrainStreamNumbers(const std::vector<RankRuntime>& ranks);

void FillWorkerInfo(int rank, const MemberIdentity& id, const RankRuntime& rt, int train_stream,
                    v1::WorkerInfo* out);

}  // namespace psync::server
