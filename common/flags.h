// Command-line flags for every psync binary, on top of Abseil's flag registry.
//
// The CLI contract (docs/cli-contract.md) spells flags with dashes
// (--world-size) while ABSL_FLAG names use underscores (FLAGS_world_size), and
// wants a bad flag to print ONE line naming it and exit with status 2
// (absl::ParseCommandLine prints several lines and exits 1). ParseFlagsStrict
// parses the usual syntax (--name=value, --name value, --bool, --nobool,
// -name; dashes or underscores in names) into the registered flags and
// returns an InvalidArgument status instead of exiting:
//   "unknown flag --foo (see --help)"
//   "flag --port: invalid value 'x': ..."
//   "flag --port is missing its value"
// ParseFlagsOrExit is the one-call version for main(): it prints
// "PROGRAM: <message>" and exits 2 on an error, prints the usage and the
// flags and exits 0 on --help.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync {

struct ParsedArgs {
  std::vector<std::string> positional;   // non-flag arguments (argv[0] excluded)
  std::vector<std::string> after_dashes; // everything after a bare "--" (when stop_at_dashes)
  std::set<std::string> specified;       // names (underscore form) of the flags given
  bool help = false;                     // --help / -h was given

  bool given(const std::string& underscore_name) const { return specified.count(underscore_name) > 0; }
};

// Parses argv[1..argc). Only the flags named in `allowed` (underscore form)
// are accepted (empty = any registered flag), so a binary does not pick up
// flags that linked-in libraries registered. With stop_at_dashes, a bare "--"
// ends flag parsing and the rest goes to after_dashes; otherwise "--" ends
// flags and the rest is positional.
absl::StatusOr<ParsedArgs> ParseFlagsStrict(int argc, char** argv, const std::set<std::string>& allowed,
                                            bool stop_at_dashes = false);

// "  --name=default\n      help" lines for `allowed`, sorted by name, dashed.
std::string FlagsHelp(const std::set<std::string>& allowed);

// The names of the flags defined (ABSL_FLAG) in the source file `file`
// (pass __FILE__ from the file that defines them).
std::set<std::string> FlagsDefinedIn(const std::string& file);

// For main(): ParseFlagsStrict, then on an error prints "<program>: <message>"
// to stderr and exits 2; on --help prints "usage: <usage>\n" and FlagsHelp to
// stdout and exits 0.
ParsedArgs ParseFlagsOrExit(const std::string& program, const std::string& usage, int argc, char** argv,
                            const std::set<std::string>& allowed, bool stop_at_dashes = false);

// Prints "<program>: <message>" to stderr and exits 2 (a bad flag value found
// after parsing, e.g. out of range).
[[noreturn]] void ExitBadFlag(const std::string& program, const std::string& message);

}  // namespace psync
