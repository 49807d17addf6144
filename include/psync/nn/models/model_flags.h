// A model's own command-line flags. A model registered with RegisterModel
// (psync/nn/models/registry.h) declares them (name, default, help);
// psync-worker (WorkerMain) then accepts --name=value for it, lists them in
// --help, records them in checkpoints and in the job's fingerprint (every
// rank must give the same values), and hands the values to the model's
// factory in ModelOptions::flags:
//
//   {"n-kv-head", "2", "key/value heads (grouped-query attention)"}
//   PSYNC_ASSIGN_OR_RETURN(int64_t kv, options.flags.Int("n-kv-head"));
//
// Names are dashed lowercase words ("n-kv-head"); the getters' errors name
// the flag ("--n-kv-head: 'x' is not an integer"), so a factory can return
// them as they are (psync-worker exits 2 with that line).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace psync::nn {

struct ModelFlag {
  std::string name;           // "n-kv-head": [a-z0-9-], starting with a letter
  std::string default_value;  // used when the flag is not given
  std::string help;
};

// OK when `flag.name` is a valid flag name; otherwise says why.
absl::Status ValidateModelFlagName(const std::string& name);

class ModelFlags {
 public:
  ModelFlags() = default;
  // name -> value (every declared flag, defaults filled in).
  explicit ModelFlags(std::map<std::string, std::string> values) : values_(std::move(values)) {}

  bool empty() const { return values_.empty(); }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  const std::map<std::string, std::string>& values() const { return values_; }
  // Sets (or replaces) one flag's value.
  void Set(const std::string& name, std::string value) { values_[name] = std::move(value); }

  // NotFound for a flag the model did not declare; InvalidArgument naming
  // the flag for a value of the wrong kind.
  absl::StatusOr<std::string> String(const std::string& name) const;
  absl::StatusOr<int64_t> Int(const std::string& name) const;
  absl::StatusOr<double> Double(const std::string& name) const;
  absl::StatusOr<bool> Bool(const std::string& name) const;     // true/false/1/0
  absl::StatusOr<std::vector<int64_t>> Ints(const std::string& name) const;  // "16,32"

  bool operator==(const ModelFlags& o) const { return values_ == o.values_; }

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace psync::nn
