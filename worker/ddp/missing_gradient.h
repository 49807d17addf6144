// The error of a backward that left parameters without a gradient while
// find_unused_parameters is off (Reducer). It says what happened and what to
// do in DDP's own terms (DdpOptions::find_unused_parameters). A program that
// sets that option from a flag of its own restates the advice in its terms
// (psync-worker: --find-unused-parameters) with RestateMissingGradientAdvice;
// a payload marks which part of the message is the advice, so no message is
// matched by its wording.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace psync::ddp {

// `facts` (what happened, to which parameters), then DDP's advice. Code
// FAILED_PRECONDITION.
absl::Status MissingGradientError(absl::string_view facts);

// `status` with DDP's advice replaced by `advice` when it is a
// MissingGradientError (also after annotations: payloads are kept), else
// `status` unchanged.
absl::Status RestateMissingGradientAdvice(const absl::Status& status, absl::string_view advice);

}  // namespace psync::ddp
