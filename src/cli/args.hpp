// args.hpp — the option parser every `pstate` subcommand shares, so all of them accept the same
// shapes: `--name VALUE`, `--name=VALUE`, `--flag`, `-h`/`--help`, and `--` before positional
// arguments (for `pstate run -- PROGRAM ARGS`). Options are declared in a table (OptionSpec), the
// same table prints --help, and mistakes throw UsageError with a message that names the option.
#pragma once

#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace pstate::cli {

// Bad command-line usage: main prints "pstate CMD: message" and a --help hint, exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OptionSpec {
  const char *name;        // "--world"
  const char *value_name;  // "N" for an option with a value; nullptr for a flag
  const char *help;        // one line
};

struct CommandSpec {
  const char *name;                      // "layout"
  const char *summary;                   // one line, for `pstate --help`
  const char *usage;                     // after "pstate NAME ": "--world N [--tp N] ..."
  const char *description;               // paragraphs printed under the usage line
  std::span<const OptionSpec> options;   // --help is implied
  bool takes_positional = false;         // whether arguments that are not options are allowed
  bool stop_at_positional = false;       // the first positional word ends option parsing (run PROG --its-opts)
};

class ParsedArgs {
 public:
  bool help() const { return help_; }
  bool flag(std::string_view name) const { return values_.count(std::string(name)) != 0; }
  std::optional<std::string> value(std::string_view name) const;
  // The option's value as an int (any int: ranges are the library's to judge); `fallback` when
  // absent. Throws UsageError for text that is not a whole number that fits an int.
  int int_value(std::string_view name, int fallback) const;
  // Like int_value, but the option must be given.
  int required_int(std::string_view name) const;
  const std::vector<std::string> &positional() const { return positional_; }

 private:
  friend ParsedArgs parse_args(const CommandSpec &spec, int argc, char **argv);
  bool help_ = false;
  std::map<std::string, std::string> values_;  // flags map to ""
  std::vector<std::string> positional_;
};

// Parses argv[0..argc) (the words after the subcommand name) against spec.
ParsedArgs parse_args(const CommandSpec &spec, int argc, char **argv);

// Usage line, description and the option table.
void print_help(const CommandSpec &spec, std::FILE *out);

}  // namespace pstate::cli
