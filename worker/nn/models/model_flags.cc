#include "psync/nn/models/model_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace psync::nn {

absl::Status ValidateModelFlagName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 && name[0] >= 'a' && name[0] <= 'z' && name.back() != '-';
  for (char c : name) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "model flag name '", name, "': use dashed lowercase words (a-z, 0-9, '-', at most 64), e.g. 'n-kv-head'"));
}

absl::StatusOr<std::string> ModelFlags::String(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    std::vector<std::string> known;
    for (const auto& [k, v] : values_) known.push_back("--" + k);
    return absl::NotFoundError(absl::StrCat("--", name, " is not a flag of this model (its flags: ",
                                            known.empty() ? "none" : absl::StrJoin(known, " "), ")"));
  }
  return it->second;
}

absl::StatusOr<int64_t> ModelFlags::Int(const std::string& name) const {
  absl::StatusOr<std::string> s = String(name);
  if (!s.ok()) return s.status();
  int64_t v = 0;
  if (!absl::SimpleAtoi(*s, &v)) return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", *s, "' is not an integer"));
  return v;
}

absl::StatusOr<double> ModelFlags::Double(const std::string& name) const {
  absl::StatusOr<std::string> s = String(name);
  if (!s.ok()) return s.status();
  double v = 0;
  if (!absl::SimpleAtod(*s, &v)) return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", *s, "' is not a number"));
  return v;
}

absl::StatusOr<bool> ModelFlags::Bool(const std::string& name) const {
  absl::StatusOr<std::string> s = String(name);
  if (!s.ok()) return s.status();
  bool v = false;
  if (!absl::SimpleAtob(*s, &v)) return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", *s, "' is not true or false"));
  return v;
}

absl::StatusOr<std::vector<int64_t>> ModelFlags::Ints(const std::string& name) const {
  absl::StatusOr<std::string> s = String(name);
  if (!s.ok()) return s.status();
  std::vector<int64_t> out;
  if (s->empty()) return out;
  for (absl::string_view part : absl::StrSplit(*s, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", *s, "' is not a comma-separated list of integers"));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace psync::nn
