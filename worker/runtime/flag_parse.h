// Strict command-line parsing on top of Abseil's flag registry.
//
// absl::ParseCommandLine exits with status 1 and a multi-line message on a bad
// flag; the CLI contract (docs/cli-contract.md) wants a one-line error naming
// the flag and exit status 2. ParseFlagsStrict parses the same syntax
// (--name=value, --name value, --bool, --nobool, -name too) into the flags
// registered with ABSL_FLAG and returns an InvalidArgument status instead.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync::runtime {

struct ParsedArgs {
  std::vector<std::string> positional;   // non-flag arguments (argv[0] excluded)
  std::vector<std::string> after_dashes; // everything after a bare "--" (when stop_at_dashes)
  std::set<std::string> specified;       // names of the flags given on the command line
  bool help = false;                     // --help / -h was given
};

// Parses argv[1..argc). Only the flags named in `allowed` are accepted (empty =
// any registered flag), so a binary does not pick up flags that linked-in
// libraries registered. With stop_at_dashes, a bare "--" ends flag parsing and
// the rest goes to after_dashes; otherwise "--" ends flags and the rest is positional.
absl::StatusOr<ParsedArgs> ParseFlagsStrict(int argc, char** argv, const std::set<std::string>& allowed,
                                            bool stop_at_dashes = false);

// "  --name=default  help" lines for `allowed`, sorted by name.
std::string FlagsHelp(const std::set<std::string>& allowed);

}  // namespace psync::runtime
