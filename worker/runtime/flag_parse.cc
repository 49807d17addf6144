#include "worker/runtime/flag_parse.h"

#include <algorithm>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"

namespace psync::runtime {

absl::StatusOr<ParsedArgs> ParseFlagsStrict(int argc, char** argv, const std::set<std::string>& allowed,
                                            bool stop_at_dashes) {
  ParsedArgs out;
  auto lookup = [&](const std::string& name) -> absl::CommandLineFlag* {
    if (!allowed.empty() && allowed.count(name) == 0) return nullptr;
    absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    if (f == nullptr || f->IsRetired()) return nullptr;
    return f;
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      for (int j = i + 1; j < argc; ++j) (stop_at_dashes ? out.after_dashes : out.positional).push_back(argv[j]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      out.positional.push_back(arg);
      continue;
    }
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    if (body == "help" || body == "h" || body == "helpfull") {
      out.help = true;
      continue;
    }
    std::string name = body, value;
    bool has_value = false;
    size_t eq = body.find('=');
    if (eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("malformed argument '", arg, "'"));
    const std::string shown = name;                  // as the user wrote it
    std::replace(name.begin(), name.end(), '-', '_');  // --world-size is FLAGS_world_size
    absl::CommandLineFlag* flag = lookup(name);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* neg = lookup(name.substr(2));
      if (neg != nullptr && neg->IsOfType<bool>()) {
        std::string err;
        neg->ParseFrom("false", &err);
        out.specified.insert(name.substr(2));
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", shown, " (see --help)"));
    }
    if (!has_value) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", shown, " is missing its value"));
      }
    }
    std::string err;
    if (!flag->ParseFrom(value, &err)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", shown, ": invalid value '", value, "'", err.empty() ? "" : ": ", err));
    }
    out.specified.insert(name);
  }
  return out;
}

std::string FlagsHelp(const std::set<std::string>& allowed) {
  std::string out;
  for (const std::string& name : allowed) {
    absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    if (f == nullptr) continue;
    std::string shown = name;
    std::replace(shown.begin(), shown.end(), '_', '-');
    absl::StrAppend(&out, "  --", shown, "=", f->DefaultValue(), "\n      ", f->Help(), "\n");
  }
  return out;
}

}  // namespace psync::runtime
