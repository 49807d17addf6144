#include "worker/ddp/missing_gradient.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/types/optional.h"

namespace psync::ddp {
namespace {

constexpr char kPayloadUrl[] = "psync.dev/ddp-missing-gradient-advice";
constexpr char kAdvice[] =
    "Every parameter must get a gradient in every backward unless find_unused_parameters is on: enable "
    "DdpOptions::find_unused_parameters (and run forward through DistributedDataParallel), or make sure every "
    "output of forward takes part in the loss.";

}  // namespace

absl::Status MissingGradientError(absl::string_view facts) {
  absl::Status st = absl::FailedPreconditionError(absl::StrCat(facts, ". ", kAdvice));
  st.SetPayload(kPayloadUrl, absl::Cord(kAdvice));
  return st;
}

absl::Status RestateMissingGradientAdvice(const absl::Status& status, absl::string_view advice) {
  absl::optional<absl::Cord> ddp_advice = status.GetPayload(kPayloadUrl);
  if (!ddp_advice) return status;
  absl::Status out(status.code(),
                   absl::StrReplaceAll(status.message(), {{std::string(*ddp_advice), std::string(advice)}}));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    if (url != kPayloadUrl) out.SetPayload(url, payload);
  });
  return out;
}

}  // namespace psync::ddp
