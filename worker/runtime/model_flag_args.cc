#include "worker/runtime/model_flag_args.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "psync/nn/models/registry.h"

namespace psync::runtime {
namespace {

// "--n_kv_head=2" -> ("n-kv-head", "2", true); "-n-kv-head" -> ("n-kv-head", "", false).
struct FlagArg {
  std::string name;
  std::string value;
  bool has_value = false;
};

bool ParseFlagArg(const std::string& arg, FlagArg* out) {
  if (arg.size() < 2 || arg[0] != '-' || arg == "--") return false;
  std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
  const size_t eq = body.find('=');
  out->has_value = eq != std::string::npos;
  out->value = out->has_value ? body.substr(eq + 1) : "";
  out->name = absl::StrReplaceAll(out->has_value ? body.substr(0, eq) : body, {{"_", "-"}});
  return !out->name.empty();
}

}  // namespace

absl::StatusOr<ModelFlagArgs> SplitModelFlags(int argc, char** argv, const std::set<std::string>& worker_flags) {
  std::set<std::string> declared;
  for (const auto& [model, flag] : nn::AllModelFlags()) {
    if (worker_flags.count(absl::StrReplaceAll(flag.name, {{"-", "_"}})) > 0 || flag.name == "help") {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", model, "' declares --", flag.name,
          ", which is psync-worker's own flag: read it from ModelOptions or give the model's flag another name"));
    }
    declared.insert(flag.name);
  }
  ModelFlagArgs out;
  if (argc > 0) out.rest.push_back(argv[0]);
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    FlagArg f;
    if (flags_ended || !ParseFlagArg(arg, &f) || declared.count(f.name) == 0) {
      flags_ended = flags_ended || arg == "--";
      out.rest.push_back(arg);
      continue;
    }
    if (!f.has_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("flag --", f.name, " is missing its value"));
      f.value = argv[++i];
    }
    out.given[f.name] = f.value;
  }
  return out;
}

absl::StatusOr<nn::ModelFlags> ResolveModelFlags(const std::string& model,
                                                 const std::map<std::string, std::string>& given) {
  std::map<std::string, std::string> values;
  for (const nn::ModelFlag& f : nn::ModelFlagsOf(model)) values[f.name] = f.default_value;
  for (const auto& [name, value] : given) {
    if (values.count(name) == 0) {
      std::vector<std::string> owners;
      for (const auto& [m, flag] : nn::AllModelFlags()) {
        if (flag.name == name) owners.push_back("--model=" + m);
      }
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " belongs to ", absl::StrJoin(owners, ", "),
                                                     ", not to --model=", model));
    }
    values[name] = value;
  }
  return nn::ModelFlags(std::move(values));
}

std::string ModelsHelp() {
  std::string out = absl::StrCat("models (--model):\n", nn::Models().Help());
  std::string current;
  for (const auto& [model, flag] : nn::AllModelFlags()) {
    if (model != current) {
      absl::StrAppend(&out, "flags of --model=", model, ":\n");
      current = model;
    }
    absl::StrAppend(&out, "  --", flag.name, "=", flag.default_value, "\n      ", flag.help, "\n");
  }
  return out;
}

}  // namespace psync::runtime
