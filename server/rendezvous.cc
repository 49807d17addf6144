#include "server/rendezvous.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/limits.h"

namespace psync::server {
namespace {

std::string ParamString(const v1::ParamSpec& p) {
  std::string s = absl::StrCat("'", p.name(), "' [", absl::StrJoin(p.shape(), ", "), "]");
  if (p.element_size() != 0 && p.element_size() != 4) absl::StrAppend(&s, " x", p.element_size(), "B");
  return s;
}

bool SameParam(const v1::ParamSpec& a, const v1::ParamSpec& b) {
  auto es = [](const v1::ParamSpec& p) { return p.element_size() ? p.element_size() : 4; };
  return a.name() == b.name() && es(a) == es(b) &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end());
}

// The worker a Join comes from, before it has a rank: "rank 1 (host:pid)".
std::string JoinerName(const v1::JoinRequest& req) {
  return absl::StrCat(req.requested_rank() >= 0 ? absl::StrCat("rank ", req.requested_rank()) : "this worker", " (",
                      req.hostname().substr(0, 64), ":", req.pid(), ")");
}

// A setting's value in an error: quoted, and short (values may be 1 KiB).
std::string ValueText(const std::string* v) {
  if (v == nullptr) return "not set";
  if (v->size() <= 120) return absl::StrCat("'", *v, "'");
  return absl::StrCat("'", v->substr(0, 120), "...'");
}

}  // namespace

int64_t NewestCommonStep(const std::vector<std::vector<int64_t>>& per_rank) {
  if (per_rank.empty()) return 0;
  // A step counts when every list holds it; lists are small (<= 64 steps).
  std::vector<int64_t> common = per_rank.front();
  std::sort(common.begin(), common.end());
  common.erase(std::unique(common.begin(), common.end()), common.end());
  for (size_t i = 1; i < per_rank.size() && !common.empty(); ++i) {
    std::vector<int64_t> next = per_rank[i];
    std::sort(next.begin(), next.end());
    std::vector<int64_t> both;
    std::set_intersection(common.begin(), common.end(), next.begin(), next.end(), std::back_inserter(both));
    common = std::move(both);
  }
  return common.empty() ? 0 : common.back();
}

std::optional<LiveStart> PickLiveStart(const std::vector<std::optional<int64_t>>& live_steps) {
  std::optional<LiveStart> out;
  for (size_t r = 0; r < live_steps.size(); ++r) {
    if (!live_steps[r]) continue;
    if (!out || *live_steps[r] > out->step) {
      out = LiveStart{};
      out->step = *live_steps[r];
      out->source = static_cast<int>(r);
    }
  }
  if (!out) return out;
  for (size_t r = 0; r < live_steps.size(); ++r) {
    if (!live_steps[r] || *live_steps[r] != out->step) out->healed.push_back(static_cast<int>(r));
  }
  out->heal = !out->healed.empty();
  return out;
}

Rendezvous::Rendezvous(int world_size) : members_(static_cast<size_t>(world_size)) {}

std::string Rendezvous::RankName(int rank) const {
  const MemberIdentity& m = member(rank);
  if (!m.joined && m.hostname.empty()) return absl::StrCat("rank ", rank);
  return absl::StrCat("rank ", rank, " (", m.hostname, ":", m.pid, ")");
}

absl::Status Rendezvous::CheckStart(const v1::JoinRequest& req, const std::string& first) const {
  const std::string who = JoinerName(req);
  // Why no comparison under live recovery: the start is the survivors'
  // newest step (Agree), and whoever is not at it is healed from a peer, so
  // a replacement's own start (a checkpoint, or none) does not matter.
  if (req.has_live_step() || live_members_ > 0) return absl::OkStatus();
  if (req.agree_resume() != agree_resume_) {
    auto mode = [](bool agree) {
      return agree ? "lets the coordinator pick the resume step (--resume)" : "starts at its own iteration";
    };
    return absl::FailedPreconditionError(absl::StrCat(who, " ", mode(req.agree_resume()), " but ", first, " ",
                                                      mode(agree_resume_), ": pass --resume to every rank or to none"));
  }
  // With the agreement the step is decided once the world is complete
  // (Agree), so differing checkpoint lists are expected, not an error.
  if (agree_resume_ || req.start_iteration() == start_iteration_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      who, " starts at iteration ", req.start_iteration(), " but ", first, " starts at iteration ", start_iteration_,
      ": every rank must resume from the same checkpoint step (is the checkpoint directory shared, and did a "
      "newer checkpoint appear while the ranks started?)"));
}

absl::Status Rendezvous::CheckSettings(const v1::JoinRequest& req, const std::string& who) const {
  std::map<std::string, const std::string*> mine;
  for (const v1::JobSetting& s : req.settings()) mine.emplace(s.name(), &s.value());
  // Why every name of both, in name order: the first difference reported is
  // the same whichever order the ranks listed their settings in.
  std::set<std::string> names;
  for (const auto& [name, value] : mine) names.insert(name);
  for (const auto& [name, value] : settings_) names.insert(name);
  for (const std::string& name : names) {
    auto own = mine.find(name);
    auto theirs = settings_.find(name);
    const std::string* here = own == mine.end() ? nullptr : own->second;
    const std::string* there = theirs == settings_.end() ? nullptr : &theirs->second;
    if (here != nullptr && there != nullptr && *here == *there) continue;
    const bool flag = absl::StartsWith(name, "--");
    return absl::FailedPreconditionError(absl::StrCat(
        "the job differs between ranks: ", name, " is ", ValueText(here), " on ", who, " but ", ValueText(there),
        " on ", RankName(reference_rank_), ", the first to join; every rank must train the same job (",
        flag ? absl::StrCat("pass the same ", name, " to every rank") : "give every rank the same " + name,
        "; docs/cli-contract.md lists the flags that may differ per rank)"));
  }
  return absl::OkStatus();
}

absl::Status Rendezvous::CheckSameJob(const v1::JoinRequest& req) const {
  if (!has_reference()) return absl::OkStatus();
  const std::string first = absl::StrCat("the first worker's (rank ", reference_rank_, ")");
  if (req.backend() != backend_) {
    return absl::FailedPreconditionError(absl::StrCat("backend '", req.backend(), "' differs from ",
                                                      first, " '", backend_,
                                                      "': every rank must use the same backend"));
  }
  if (req.bucket_cap_bytes() != bucket_cap_ || req.first_bucket_cap_bytes() != first_bucket_cap_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "bucket caps (", req.bucket_cap_bytes(), " / first ", req.first_bucket_cap_bytes(),
        " bytes) differ from ", first, " (", bucket_cap_, " / first ", first_bucket_cap_,
        " bytes): pass the same --bucket-cap-mb and --first-bucket-mb to every rank"));
  }
  if (req.global_batch() != global_batch_) {
    return absl::FailedPreconditionError(absl::StrCat("global batch ", req.global_batch(), " differs from ", first,
                                                      " ", global_batch_,
                                                      ": pass the same --global-batch to every rank"));
  }
  const std::string who = JoinerName(req);
  if (absl::Status st = CheckSettings(req, who); !st.ok()) return st;
  const int n = req.manifest_size();
  const int ref = static_cast<int>(manifest_.size());
  for (int i = 0; i < std::min(n, ref); ++i) {
    if (!SameParam(req.manifest(i), manifest_[static_cast<size_t>(i)])) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model differs from ", first, ": parameter ", i, " is ", ParamString(req.manifest(i)),
          " here but ", ParamString(manifest_[static_cast<size_t>(i)]),
          " there; every rank must build the same model"));
    }
  }
  if (n != ref) {
    const std::string extra = n > ref ? absl::StrCat("this worker has extra parameter ", ref, " ",
                                                     ParamString(req.manifest(ref)))
                                      : absl::StrCat("this worker lacks parameter ", n, " ",
                                                     ParamString(manifest_[static_cast<size_t>(n)]));
    return absl::FailedPreconditionError(absl::StrCat("model differs from ", first, ": ", n,
                                                      " parameters here, ", ref, " there; ", extra,
                                                      "; every rank must build the same model"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Rendezvous::PickRank(const v1::JoinRequest& req) const {
  if (has_reference()) {
    // The start after the job: a rank of another job is named as such
    // (JobState refuses the waiting ranks too), a different start is not.
    if (absl::Status st = CheckSameJob(req); !st.ok()) return st;
    if (absl::Status st = CheckStart(req, absl::StrCat("the first worker's (rank ", reference_rank_, ")")); !st.ok()) {
      return st;
    }
  }
  int rank = req.requested_rank();
  if (rank >= 0) {
    if (rank >= world_size()) {
      return absl::InvalidArgumentError(absl::StrCat("requested rank ", rank,
                                                     " is out of range for world size ", world_size()));
    }
    if (member(rank).joined) {
      return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " is already taken by ", RankName(rank),
                                                   ": give each worker a distinct RANK"));
    }
    return rank;
  }
  for (int r = 0; r < world_size(); ++r) {
    if (!member(r).joined) return r;
  }
  return absl::ResourceExhaustedError(absl::StrCat("world is full: all ", world_size(), " ranks are taken"));
}

void Rendezvous::Add(int rank, const v1::JoinRequest& req) {
  if (!has_reference()) {
    // Why: the first member defines the model, caps and backend; every later
    // Join is checked against it (CheckSameJob, CheckStart).
    reference_rank_ = rank;
    manifest_.assign(req.manifest().begin(), req.manifest().end());
    param_bytes_.clear();
    for (const auto& p : manifest_) param_bytes_.push_back(ParamBytes(p));
    backend_ = req.backend();
    bucket_cap_ = req.bucket_cap_bytes();
    first_bucket_cap_ = req.first_bucket_cap_bytes();
    global_batch_ = req.global_batch();
    settings_.clear();
    for (const v1::JobSetting& s : req.settings()) settings_.emplace(s.name(), s.value());
    start_iteration_ = req.start_iteration();
    agree_resume_ = req.agree_resume();
  }
  MemberIdentity& m = members_[static_cast<size_t>(rank)];
  m.joined = true;
  m.hostname = req.hostname();
  m.device = req.device();
  m.pid = req.pid();
  m.host_id = req.host_id().empty() ? req.hostname() : req.host_id();
  m.checkpoint_steps.assign(req.checkpoint_steps().begin(), req.checkpoint_steps().end());
  m.live_step.reset();
  if (req.has_live_step()) {
    m.live_step = req.live_step();
    ++live_members_;
  }
  ++joined_;
}

void Rendezvous::Remove(int rank) {
  MemberIdentity& m = members_[static_cast<size_t>(rank)];
  if (!m.joined) return;
  if (m.live_step) --live_members_;
  m = MemberIdentity{};
  --joined_;
  // Why: with nobody left, the next Join may bring a different model.
  if (joined_ == 0) reference_rank_ = -1;
}

std::string Rendezvous::Agree() {
  heal_source_ = -1;
  if (live_members_ > 0) return AgreeLive();
  if (!agree_resume_) return "";
  std::vector<std::vector<int64_t>> lists;
  lists.reserve(members_.size());
  for (const MemberIdentity& m : members_) lists.push_back(m.checkpoint_steps);
  // Why here, once: the world is complete, so no later Join can change the
  // step; every rank gets this one in its JoinResponse and loads it.
  start_iteration_ = NewestCommonStep(lists);
  // The event log names a rank that held the choice back (it listed fewer
  // or older checkpoints than rank 0), so a lost step is explained.
  int64_t newest_r0 = 0;
  for (int64_t s : members_.front().checkpoint_steps) newest_r0 = std::max(newest_r0, s);
  std::string note = start_iteration_ > 0
                         ? absl::StrCat("the newest checkpoint step every rank can load is ", start_iteration_)
                         : "no checkpoint step is loadable by every rank: starting from scratch";
  if (newest_r0 > start_iteration_) {
    for (int r = 1; r < world_size(); ++r) {
      const auto& steps = member(r).checkpoint_steps;
      if (std::find(steps.begin(), steps.end(), newest_r0) == steps.end()) {
        absl::StrAppend(&note, "; rank 0 lists step ", newest_r0, " but ", RankName(r), " cannot load it");
        break;
      }
    }
  }
  return note;
}

std::string Rendezvous::AgreeLive() {
  std::vector<std::optional<int64_t>> live;
  live.reserve(members_.size());
  for (const MemberIdentity& m : members_) live.push_back(m.live_step);
  const LiveStart pick = *PickLiveStart(live);
  // Why the newest: a survivor completes a step only once every rank's
  // gradients of it were reduced, so the ranks at the newest step hold the
  // one true state; a rank one step behind takes it rather than recompute.
  start_iteration_ = pick.step;
  heal_source_ = pick.heal ? pick.source : -1;
  std::string note = absl::StrCat("live recovery: ", live_members_, " rank(s) kept their state in memory; starting at ",
                                  "step ", pick.step);
  if (pick.heal) {
    std::vector<std::string> names;
    for (int r : pick.healed) names.push_back(RankName(r));
    absl::StrAppend(&note, "; ", RankName(pick.source), " heals ", absl::StrJoin(names, ", "));
  }
  return note;
}

std::vector<int> Rendezvous::MissingRanks(size_t at_most) const {
  std::vector<int> out;
  for (int r = 0; r < world_size() && out.size() < at_most; ++r) {
    if (!member(r).joined) out.push_back(r);
  }
  return out;
}

Rendezvous Rendezvous::Compacted(std::vector<int>* old_ranks) const {
  Rendezvous out = *this;
  out.members_.clear();
  old_ranks->clear();
  for (int r = 0; r < world_size(); ++r) {
    if (!member(r).joined) continue;
    if (r == reference_rank_) out.reference_rank_ = static_cast<int>(out.members_.size());
    old_ranks->push_back(r);
    out.members_.push_back(member(r));
  }
  if (out.reference_rank_ >= static_cast<int>(out.members_.size())) out.reference_rank_ = 0;
  out.joined_ = static_cast<int>(out.members_.size());
  return out;
}

void Rendezvous::FillHosts(v1::JoinResponse* resp) const {
  std::unordered_map<std::string, int> index;
  resp->mutable_rank_host_index()->Reserve(world_size());
  for (int r = 0; r < world_size(); ++r) {
    auto [it, inserted] = index.emplace(member(r).host_id, static_cast<int>(index.size()));
    if (inserted) resp->add_host_ids(it->first);
    resp->add_rank_host_index(it->second);
  }
}

}  // namespace psync::server
