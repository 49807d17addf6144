#include "worker/data/data_part.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace psync::data {

absl::StatusOr<PartRange> SelectPart(const DataOptions& o, const std::string& path, int64_t total,
                                     const std::string& unit) {
  if (o.part == DataPart::kWhole) return PartRange{0, total};
  if (!(o.val_fraction > 0 && o.val_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--val-fraction is ", o.val_fraction, ", expected a fraction in (0, 1)"));
  }
  const int64_t tail = static_cast<int64_t>(std::floor(o.val_fraction * static_cast<double>(total)));
  const int64_t head = total - tail;
  if (tail < 1) {
    return absl::InvalidArgumentError(absl::StrCat(o.flag, " ", path, ": --val-fraction=", o.val_fraction, " of ",
                                                   total, " ", unit, " holds out 0 ", unit,
                                                   ", expected at least 1 (raise --val-fraction)"));
  }
  if (head < 1) {
    return absl::InvalidArgumentError(absl::StrCat(o.flag, " ", path, ": --val-fraction=", o.val_fraction, " of ",
                                                   total, " ", unit, " leaves no training ", unit));
  }
  return o.part == DataPart::kHead ? PartRange{0, head} : PartRange{head, tail};
}

std::string PartDescription(const DataOptions& o, const PartRange& r, int64_t total, const std::string& unit) {
  switch (o.part) {
    case DataPart::kWhole:
      return "";
    case DataPart::kHead:
      return absl::StrCat(" (first ", r.count, " of ", total, " ", unit, ")");
    case DataPart::kTail:
      return absl::StrCat(" (last ", r.count, " of ", total, " ", unit, ", held out by --val-fraction=", o.val_fraction,
                          ")");
  }
  return "";
}

absl::Status CheckExampleRange(int64_t begin, int64_t count, int64_t num_examples) {
  if (begin < 0 || count < 1 || begin > num_examples || count > num_examples - begin) {
    return absl::InvalidArgumentError(
        absl::StrCat("examples [", begin, ", ", begin + count, ") are outside the dataset's ", num_examples,
                     " examples (expected 0 <= begin, count >= 1, begin + count <= ", num_examples, ")"));
  }
  return absl::OkStatus();
}

}  // namespace psync::data
