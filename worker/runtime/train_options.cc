#include "worker/runtime/train_options.h"

namespace psync::runtime {

const char* SkipPatternName(SkipPattern p) {
  switch (p) {
    case SkipPattern::kAlways: return "always";
    case SkipPattern::kOdd: return "odd";
    case SkipPattern::kLastMicro: return "lastmicro";
  }
  return "?";
}

bool SkipSchedule::Active(int64_t step, int64_t micro, int64_t accumulate) const {
  if (layer < 0) return false;
  switch (pattern) {
    case SkipPattern::kAlways: return true;
    case SkipPattern::kOdd: return step % 2 == 1;
    case SkipPattern::kLastMicro: return micro == accumulate - 1;
  }
  return false;
}

}  // namespace psync::runtime
