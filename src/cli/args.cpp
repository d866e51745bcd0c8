// args.cpp — parse_args and print_help (see args.hpp).
#include "cli/args.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace pstate::cli {

namespace {

const OptionSpec *find_option(const CommandSpec &spec, std::string_view name) {
  for (const OptionSpec &o : spec.options)
    if (name == o.name) return &o;
  return nullptr;
}

}  // namespace

std::optional<std::string> ParsedArgs::value(std::string_view name) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

int ParsedArgs::int_value(std::string_view name, int fallback) const {
  auto text = value(name);
  if (!text) return fallback;
  errno = 0;
  char *end = nullptr;
  long v = std::strtol(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0')
    throw UsageError(std::string(name) + " expects a whole number, got '" + *text + "'");
  if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
    throw UsageError(std::string(name) + " " + *text + " is out of range (it must fit an int)");
  return static_cast<int>(v);
}

int ParsedArgs::required_int(std::string_view name) const {
  if (!value(name)) throw UsageError(std::string(name) + " is required");
  return int_value(name, 0);
}

ParsedArgs parse_args(const CommandSpec &spec, int argc, char **argv) {
  ParsedArgs args;
  for (int i = 0; i < argc; ++i) {
    std::string_view word = argv[i];
    if (word == "--") {  // everything after is positional
      for (++i; i < argc; ++i) args.positional_.emplace_back(argv[i]);
      break;
    }
    if (word == "-h" || word == "--help") {
      args.help_ = true;
      continue;
    }
    if (word.size() < 2 || word[0] != '-') {
      args.positional_.emplace_back(word);
      if (spec.stop_at_positional) {
        for (++i; i < argc; ++i) args.positional_.emplace_back(argv[i]);
        break;
      }
      continue;
    }
    auto eq = word.find('=');
    std::string_view name = word.substr(0, eq);
    const OptionSpec *option = find_option(spec, name);
    if (option == nullptr) throw UsageError("unknown option " + std::string(name));
    std::string value;
    if (option->value_name == nullptr) {
      if (eq != std::string_view::npos) throw UsageError(std::string(name) + " takes no value");
    } else if (eq != std::string_view::npos) {
      value = word.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw UsageError(std::string(name) + " needs a value (" + option->value_name + ")");
    }
    args.values_[std::string(name)] = value;
  }
  if (!spec.takes_positional && !args.positional_.empty() && !args.help_)
    throw UsageError("unexpected argument '" + args.positional_.front() + "'");
  return args;
}

void print_help(const CommandSpec &spec, std::FILE *out) {
  std::fprintf(out, "usage: pstate %s %s\n\n%s\n", spec.name, spec.usage, spec.description);
  std::fprintf(out, "\noptions:\n");
  for (const OptionSpec &o : spec.options) {
    std::string left = std::string(o.name) + (o.value_name ? std::string(" ") + o.value_name : "");
    std::fprintf(out, "  %-26s %s\n", left.c_str(), o.help);
  }
  std::fprintf(out, "  %-26s %s\n", "-h, --help", "print this help and exit");
}

}  // namespace pstate::cli
