#include "worker/ddp/step_check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "psync/common/exit_code.h"

namespace psync::ddp {
namespace {

constexpr int kBits = 12;
constexpr int64_t kPiece = int64_t{1} << kBits;
constexpr int kPieces48 = 4;  // 48 bits
constexpr int kPiecesPlan = 3;  // 36 bits >= the 32-bit plan id
constexpr int64_t kMask48 = (int64_t{1} << 48) - 1;
static_assert(2 * kPieces48 + kPiecesPlan == kStepTagFloats, "tag layout");

// `pieces` 12-bit pieces of `u` (>= 0), least significant first.
void PutPieces(int64_t u, int pieces, float* out) {
  for (int k = 0; k < pieces; ++k, u >>= kBits) out[k] = static_cast<float>(u & (kPiece - 1));
}

// Undoes `scale`: a piece p < 4096 arrives as p * scale rounded once in
// float32 (the sum itself is exact), so x / scale is within 4096 * 2^-24 <
// 2.5e-4 of p. Anything farther from an integer is not a piece.
bool GetPieces(const float* in, int pieces, double inv_scale, int64_t* out) {
  int64_t u = 0;
  for (int k = pieces - 1; k >= 0; --k) {
    const double x = static_cast<double>(in[k]) * inv_scale;
    const double p = std::nearbyint(x);
    if (!(std::fabs(x - p) <= 1e-3) || p < 0 || p >= static_cast<double>(kPiece)) return false;
    u = (u << kBits) | static_cast<int64_t>(p);
  }
  *out = u;
  return true;
}

void Put48(int64_t v, float* out) { PutPieces(v & kMask48, kPieces48, out); }

bool Get48(const float* in, double inv_scale, int64_t* v) {
  int64_t u = 0;
  if (!GetPieces(in, kPieces48, inv_scale, &u)) return false;
  if (u & (int64_t{1} << 47)) u -= int64_t{1} << 48;  // sign-extend
  *v = u;
  return true;
}

std::string PlanHex(uint32_t id) { return absl::StrFormat("%08x", id); }

// Ranks grouped by `key`, groups in key order.
template <typename Key, typename KeyFn>
std::map<Key, std::vector<int>> GroupBy(const std::vector<StepTag>& tags, KeyFn key) {
  std::map<Key, std::vector<int>> groups;
  for (size_t r = 0; r < tags.size(); ++r) groups[key(tags[r])].push_back(static_cast<int>(r));
  return groups;
}

// Every rank outside the one strictly largest group; empty on a tie.
template <typename Key>
std::vector<int> Minority(const std::map<Key, std::vector<int>>& groups) {
  size_t best = 0, second = 0;
  const std::vector<int>* largest = nullptr;
  for (const auto& [k, ranks] : groups) {
    if (ranks.size() > best) {
      second = best;
      best = ranks.size();
      largest = &ranks;
    } else if (ranks.size() > second) {
      second = ranks.size();
    }
  }
  std::vector<int> out;
  if (!largest || best == second) return out;
  for (const auto& [k, ranks] : groups) {
    if (&ranks != largest) out.insert(out.end(), ranks.begin(), ranks.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", RankList(ranks));
}

}  // namespace

std::string RankList(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(ranks[i]) : absl::StrCat(ranks[i], "-", ranks[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ", ");
}

uint32_t BucketPlanId(const BucketPlan& plan) {
  uint32_t h = 2166136261u;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= static_cast<uint32_t>((v >> (8 * b)) & 0xff);
      h *= 16777619u;
    }
  };
  mix(plan.size());
  for (const auto& bucket : plan) {
    mix(bucket.size());
    for (size_t p : bucket) mix(p);
  }
  return h;
}

Tensor EncodeStepTag(const StepTag& tag, int rank, int world, Device device) {
  std::vector<float> v(static_cast<size_t>(world * kStepTagFloats), 0.0f);
  float* row = v.data() + static_cast<size_t>(rank) * kStepTagFloats;
  Put48(tag.iteration, row);
  Put48(tag.sequence, row + kPieces48);
  PutPieces(static_cast<int64_t>(tag.plan_id), kPiecesPlan, row + 2 * kPieces48);
  return Tensor::FromVector(v, {world * kStepTagFloats}, device);
}

absl::StatusOr<std::vector<StepTag>> DecodeStepTags(const Tensor& reduced, int world, float scale) {
  const std::vector<float> v = reduced.ToVector();
  const double inv_scale = 1.0 / static_cast<double>(scale);
  if (static_cast<int64_t>(v.size()) != world * kStepTagFloats) {
    return absl::InvalidArgumentError(absl::StrCat("step check: ", v.size(), " values for ", world, " ranks"));
  }
  std::vector<StepTag> tags(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const float* row = v.data() + static_cast<size_t>(r) * kStepTagFloats;
    int64_t plan = 0;
    if (!Get48(row, inv_scale, &tags[r].iteration) || !Get48(row + kPieces48, inv_scale, &tags[r].sequence) ||
        !GetPieces(row + 2 * kPieces48, kPiecesPlan, inv_scale, &plan) || plan > 0xffffffffLL) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step check: rank ", r, "'s entry is not a step tag (", absl::StrJoin(row, row + kStepTagFloats, ","),
          "): a rank paired this exchange with a different collective (out of step)"));
    }
    tags[r].plan_id = static_cast<uint32_t>(plan);
  }
  return tags;
}

absl::Status CompareStepTags(const std::vector<StepTag>& tags, const std::optional<StepTag>& last_agreed, int me) {
  const int world = static_cast<int>(tags.size());
  if (std::all_of(tags.begin(), tags.end(), [&](const StepTag& t) { return t == tags.front(); })) {
    return absl::OkStatus();
  }
  // Who is out of step. First: since the last backward every rank agreed
  // on, an in-step rank's iteration advanced exactly as its sequence did;
  // a rank that skipped a backward is an iteration ahead, one that ran an
  // extra backward an iteration behind.
  std::vector<int> out;
  if (last_agreed) {
    for (int r = 0; r < world; ++r) {
      const StepTag& t = tags[static_cast<size_t>(r)];
      if (t.iteration - last_agreed->iteration != t.sequence - last_agreed->sequence) out.push_back(r);
    }
    if (static_cast<int>(out.size()) == world) out.clear();
  }
  const auto by_step = GroupBy<std::pair<int64_t, int64_t>>(
      tags, [](const StepTag& t) { return std::make_pair(t.iteration, t.sequence); });
  const auto by_plan = GroupBy<uint32_t>(tags, [](const StepTag& t) { return t.plan_id; });
  if (out.empty() && by_step.size() > 1) out = Minority(by_step);
  if (out.empty() && by_plan.size() > 1) out = Minority(by_plan);

  const bool seq_differs = GroupBy<int64_t>(tags, [](const StepTag& t) { return t.sequence; }).size() > 1;
  const bool plan_differs = by_plan.size() > 1;
  std::vector<std::string> each;
  for (const auto& [key, ranks] : GroupBy<std::tuple<int64_t, int64_t, uint32_t>>(
           tags, [](const StepTag& t) { return std::make_tuple(t.iteration, t.sequence, t.plan_id); })) {
    std::string s = absl::StrCat(Ranks(ranks), " at iteration ", std::get<0>(key));
    if (seq_differs) absl::StrAppend(&s, " (synchronised backward #", std::get<1>(key), ")");
    if (plan_differs) absl::StrAppend(&s, " with bucket plan ", PlanHex(std::get<2>(key)));
    each.push_back(std::move(s));
  }
  std::string head;
  if (!out.empty()) {
    head = absl::StrCat("DDP: ", Ranks(out), out.size() == 1 ? " is" : " are", " out of step");
  } else {
    head = "DDP: the ranks disagree on which backward they are reducing";
  }
  std::string agreed;
  if (last_agreed) {
    agreed = absl::StrCat("; the last iteration every rank reduced together was ", last_agreed->iteration);
  } else {
    agreed = "; no earlier backward was checked";
  }
  absl::Status verdict = absl::AbortedError(absl::StrCat(
      head, ": ", absl::StrJoin(each, ", "), agreed,
      ". Every rank must run exactly one synchronised backward per iteration, with the same bucket plan (a rank "
      "skipped a backward, ran an extra one, or applied a plan at another iteration); the bucket collectives would "
      "otherwise average gradients of different iterations. No gradient of this backward was applied. (seen on rank ",
      me, " of ", world, ")"));
  // A verdict that names the ranks out of step is the cause, decided here
  // (exit 4, include/psync/common/exit_code.h); without names a peer may still be lost.
  return out.empty() ? verdict : WithExitCode(std::move(verdict), kExitPeerLost);
}

}  // namespace psync::ddp
