// Buckets unused on every rank are not sent (with and without --zero).
//
// With find_unused_parameters and a source that knows the global used set
// while backward runs (UnusedParameterSource::KnowsAhead: the
// coordinator's plan), the reducer decides, for the next bucket to launch:
//   * some parameter in it got a gradient here: it is used globally too, so
//     every rank launches it (kLaunch);
//   * none did: look at the global set of this iteration; every parameter
//     unused on every rank: nobody launches it (kSkip), else everybody
//     does (kLaunch); the set not there yet: wait (kWait: later hooks look
//     again, finalize blocks for it).
// Every rank reaches the same verdict for every bucket (a rank that waits
// learns the same set everyone decides by), so the collectives still pair.
// A skipped bucket's gradients stay untouched (its parameters are unused
// everywhere), and with ZeRO its parameters are not all-gathered either.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "psync/comm/work.h"
#include "worker/ddp/bucket.h"

namespace psync::ddp {

enum class BucketFate { kLaunch, kSkip, kWait };

BucketFate DecideBucket(const Bucket& bucket, const std::vector<uint8_t>& local_used,
                        const std::optional<std::vector<uint8_t>>& global_used);

// The Work of a skipped bucket: complete, OK.
std::shared_ptr<comm::Work> SkippedBucketWork(size_t bucket);

}  // namespace psync::ddp
