// Registry: the one place a kind of plug-in (models, optimizers, datasets,
// comm backends) is chosen by name from a flag.
//
//   const Registry<Model, ModelOptions>& Models();   // filled in one .cc per kind
//   PSYNC_ASSIGN_OR_RETURN(auto model, Models().Create(opt.model, model_options));
//
// Each kind keeps its table in one function that adds every implementation
// explicitly (no static-initialiser registration: static libraries would
// drop it, and the list stays readable in one place). An unknown name is an
// InvalidArgument listing the known ones.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psync {

template <typename Product, typename Options>
class Registry {
 public:
  using Factory = std::function<absl::StatusOr<std::unique_ptr<Product>>(const Options&)>;

  // `what` names the kind in errors ("model", "optimizer").
  explicit Registry(std::string what) : what_(std::move(what)) {}

  Registry& Add(std::string name, std::string help, Factory factory) {
    entries_.push_back({std::move(name), std::move(help), std::move(factory)});
    return *this;
  }

  absl::StatusOr<std::unique_ptr<Product>> Create(const std::string& name, const Options& options) const {
    for (const Entry& e : entries_) {
      if (e.name == name) return e.factory(options);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ", what_, " '", name, "' (known: ", absl::StrJoin(Names(), ", "), ")"));
  }

  bool Contains(const std::string& name) const {
    for (const Entry& e : entries_) {
      if (e.name == name) return true;
    }
    return false;
  }

  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const Entry& e : entries_) out.push_back(e.name);
    return out;
  }

  // "name: help" lines, for --help.
  std::string Help() const {
    std::string out;
    for (const Entry& e : entries_) absl::StrAppend(&out, "  ", e.name, ": ", e.help, "\n");
    return out;
  }

 private:
  struct Entry {
    std::string name, help;
    Factory factory;
  };
  std::string what_;
  std::vector<Entry> entries_;
};

}  // namespace psync
