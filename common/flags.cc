#include "common/flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace psync {

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

std::set<std::string> FlagsDefinedIn(const std::string& file) {
  // Abseil normalizes the recorded __FILE__ (drops leading slashes): compare the same way.
  auto normalize = [](const std::string& f) {
    const size_t pos = f.find_first_not_of("\\/");
    return pos == std::string::npos ? std::string() : f.substr(pos);
  };
  const std::string want = normalize(file);
  std::set<std::string> out;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag != nullptr && !flag->IsRetired() && normalize(flag->Filename()) == want) {
      out.insert(std::string(name));
    }
  }
  return out;
}

ParsedArgs ParseFlagsOrExit(const std::string& program, const std::string& usage, int argc, char** argv,
                            const std::set<std::string>& allowed, bool stop_at_dashes) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlagsStrict(argc, argv, allowed, stop_at_dashes);
  if (!parsed.ok()) ExitBadFlag(program, std::string(parsed.status().message()));
  if (parsed->help) {
    std::fprintf(stdout, "usage: %s\n%s", usage.c_str(), FlagsHelp(allowed).c_str());
    std::fflush(stdout);
    std::exit(0);
  }
  return *std::move(parsed);
}

void ExitBadFlag(const std::string& program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), message.c_str());
  std::fflush(stderr);
  std::exit(2);
}

}  // namespace psync
