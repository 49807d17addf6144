// Rendezvous: who joined one generation of the job as which rank, and the
// reference model every rank must match. The Joins still waiting for the
// world are PendingJoins' (pending_joins.h). Part of JobState (job_state.h),
// which owns the lock: not thread-safe by itself.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/v1/coordinator.pb.h"

namespace psync::server {

// The JoinResponse every rank shares (all but the rank), built once when the
// world completes and serialized once: with thousands of ranks the
// responses would otherwise be thousands of copies of the host table and
// the initial bucket plan.
struct SharedJoinResponse {
  v1::JoinResponse response;  // rank unset
  std::string bytes;          // response, serialized
};

// A successful Join's answer: the shared part and this rank.
struct JoinAnswer {
  int rank = -1;
  std::shared_ptr<const SharedJoinResponse> shared;
  // The whole response (a copy; for tests and in-process callers).
  v1::JoinResponse Full() const {
    v1::JoinResponse r = shared->response;
    r.set_rank(rank);
    return r;
  }
  // The serialized response: the shared bytes followed by {rank} (protobuf
  // merges concatenated messages field by field).
  std::string RankBytes() const {
    v1::JoinResponse own;
    own.set_rank(rank);
    return own.SerializeAsString();
  }
};

// What a rank told us about itself in Join.
struct MemberIdentity {
  bool joined = false;
  std::string hostname, device, host_id;
  int64_t pid = 0;
  std::vector<int64_t> checkpoint_steps;  // JoinRequest.checkpoint_steps (resume agreement)
  std::optional<int64_t> live_step;       // JoinRequest.live_step (live recovery): a survivor's completed steps
};

// The live recovery's rule (coordinator.proto, "Live recovery"): the start is
// the newest live step; the source is the lowest rank holding it; healing is
// needed when some rank is not at it (a fresh process, or a survivor one
// step behind). nullopt when no rank has live state.
struct LiveStart {
  int64_t step = 0;
  int source = -1;      // the rank whose state the others take
  bool heal = false;    // whether anyone needs it (else every rank is at `step`)
  std::vector<int> healed;  // the ranks that are not at `step`
};
std::optional<LiveStart> PickLiveStart(const std::vector<std::optional<int64_t>>& live_steps);

// The resume agreement's rule (coordinator.proto, "Resume agreement"): the
// newest step that every rank's list holds; 0 when no step is in all of them
// (or `per_rank` is empty): the generation starts from scratch.
int64_t NewestCommonStep(const std::vector<std::vector<int64_t>>& per_rank);

class Rendezvous {
 public:
  explicit Rendezvous(int world_size);

  // The rank this request gets, or why it is refused (incompatible with the
  // reference model or job: FAILED_PRECONDITION, and only then; rank taken or
  // out of range, world full). No state change.
  absl::StatusOr<int> PickRank(const v1::JoinRequest& req) const;
  // Whether `req` trains the same job as the first member (backend, bucket
  // caps, global batch, settings, manifest): FAILED_PRECONDITION naming the
  // first difference. OK before any member joined.
  absl::Status CheckSameJob(const v1::JoinRequest& req) const;
  // Records `rank` as joined (the first member fixes the reference model).
  void Add(int rank, const v1::JoinRequest& req);
  // Releases `rank` again (its Join timed out or was cancelled before the
  // world completed); the last one out also forgets the reference model.
  void Remove(int rank);

  int world_size() const { return static_cast<int>(members_.size()); }
  int joined() const { return joined_; }
  bool complete() const { return joined_ == world_size(); }
  const MemberIdentity& member(int rank) const { return members_[static_cast<size_t>(rank)]; }
  std::string RankName(int rank) const;  // "rank 1 (host:pid)"
  std::vector<int> MissingRanks(size_t at_most) const;

  // The reference model and start iteration (valid once has_reference()).
  bool has_reference() const { return reference_rank_ >= 0; }
  const std::vector<v1::ParamSpec>& manifest() const { return manifest_; }
  const std::vector<int64_t>& param_bytes() const { return param_bytes_; }
  const std::string& backend() const { return backend_; }
  int64_t bucket_cap() const { return bucket_cap_; }
  int64_t first_bucket_cap() const { return first_bucket_cap_; }
  // JoinRequest.global_batch, the same on every rank (0 = not said).
  int64_t global_batch() const { return global_batch_; }
  // The iteration every rank starts at: JoinRequest.start_iteration, or
  // with the resume agreement the step Agree() chose (0 until then).
  int64_t start_iteration() const { return start_iteration_; }
  // Whether this generation's ranks let the coordinator pick the step
  // (JoinRequest.agree_resume).
  bool agree_resume() const { return agree_resume_; }
  // Once the world is complete: with the resume agreement, fixes
  // start_iteration() to the newest checkpoint step every rank can load.
  // Returns a note for the event log ("" without the agreement).
  std::string Agree();
  // After Agree, under live recovery: the rank every other rank heals from
  // (JoinResponse.heal_source), -1 when nobody needs healing.
  int heal_source() const { return heal_source_; }
  // Members that joined with live state (JoinRequest.live_step).
  int live_members() const { return live_members_; }

  // host_ids / rank_host_index of a JoinResponse (deduplicated hosts).
  void FillHosts(v1::JoinResponse* resp) const;

  // Elastic worlds: the joined members alone, as a world of joined() ranks
  // renumbered 0..n-1 in rank order (the reference model kept);
  // `old_ranks[i]` is the rank new rank i had here.
  Rendezvous Compacted(std::vector<int>* old_ranks) const;

 private:
  // The start: the same resume mode as the first worker, and without the
  // agreement the same start_iteration. `first` names the first worker.
  absl::Status CheckStart(const v1::JoinRequest& req, const std::string& first) const;
  // The job's fingerprint (JoinRequest.settings): the same names and values
  // as the first worker's, else the first difference by name.
  absl::Status CheckSettings(const v1::JoinRequest& req, const std::string& who) const;
  // Agree under live recovery (some member joined with live state).
  std::string AgreeLive();

  std::vector<MemberIdentity> members_;
  int joined_ = 0;
  int reference_rank_ = -1;
  std::vector<v1::ParamSpec> manifest_;
  std::vector<int64_t> param_bytes_;
  std::string backend_;
  int64_t bucket_cap_ = 0, first_bucket_cap_ = 0;
  int64_t global_batch_ = 0;
  std::map<std::string, std::string> settings_;  // the first worker's JoinRequest.settings
  int64_t start_iteration_ = 0;
  bool agree_resume_ = false;
  int live_members_ = 0;   // members that joined with live state (live recovery)
  int heal_source_ = -1;   // Agree's choice under live recovery
};

}  // namespace psync::server
