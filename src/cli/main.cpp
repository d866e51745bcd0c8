// main.cpp — the `pstate` command: finds the subcommand in one table and runs it.
//
//   pstate [--help | --version]
//   pstate SUBCOMMAND [options]       (every subcommand answers --help)
//
// Parsing, --help and usage errors are handled here for every subcommand (see cli.hpp), so each
// subcommand file holds only its own work. Exit status: 0 ok, 1 the work failed, 2 usage or an
// invalid configuration.
#include "cli/cli.hpp"

#include "common/build_info.hpp"
#include "common/error.hpp"

#include <cstdio>
#include <exception>
#include <string_view>

namespace pstate::cli {
namespace {

// The subcommands, in the order `pstate --help` lists them. Add new ones here.
const Subcommand &(*const kSubcommands[])() = {
    layout_subcommand,
    info_subcommand,
    run_subcommand,
    bench_subcommand,
    doctor_subcommand,
    store_subcommand,
};

void print_main_help(std::FILE *out) {
  std::fprintf(out,
               "usage: pstate [--help | --version]\n"
               "       pstate SUBCOMMAND [options]     ('pstate SUBCOMMAND --help' for its options)\n\n"
               "pstate is the parallel state of an LLM serving runtime: SGLang's process groups and\n"
               "their collectives as a C library. Subcommands:\n\n");
  for (auto get : kSubcommands) std::fprintf(out, "  %-10s %s\n", get().spec.name, get().spec.summary);
}

const Subcommand *find_subcommand(std::string_view name) {
  for (auto get : kSubcommands)
    if (name == get().spec.name) return &get();
  return nullptr;
}

int run_subcommand(const Subcommand &sub, int argc, char **argv) {
  try {
    ParsedArgs args = parse_args(sub.spec, argc, argv);
    if (args.help()) {
      print_help(sub.spec, stdout);
      return kExitOk;
    }
    return sub.run(args);
  } catch (const UsageError &e) {
    std::fprintf(stderr, "pstate %s: %s\nTry 'pstate %s --help'.\n", sub.spec.name, e.what(), sub.spec.name);
    return kExitUsage;
  } catch (const Error &e) {
    std::fprintf(stderr, "pstate %s: %s\n", sub.spec.name, e.what());
    return e.status() == PSTATE_ERR_INVALID_ARGUMENT ? kExitUsage : kExitFailure;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pstate %s: %s\n", sub.spec.name, e.what());
    return kExitFailure;
  }
}

}  // namespace
}  // namespace pstate::cli

int main(int argc, char **argv) {
  using namespace pstate::cli;
  if (argc < 2) {
    print_main_help(stderr);
    return kExitUsage;
  }
  std::string_view first = argv[1];
  if (first == "-h" || first == "--help" || first == "help") {
    print_main_help(stdout);
    return kExitOk;
  }
  if (first == "--version" || first == "-V") {
    std::printf("pstate %s (ABI major %d)\n", pstate::build_info().version.c_str(), pstate::build_info().abi_major);
    return kExitOk;
  }
  const Subcommand *sub = find_subcommand(first);
  if (sub == nullptr) {
    std::fprintf(stderr, "pstate: unknown subcommand '%s'\nTry 'pstate --help'.\n", argv[1]);
    return kExitUsage;
  }
  return run_subcommand(*sub, argc - 2, argv + 2);
}
