// cli.hpp — how a subcommand plugs into the `pstate` command.
//
// Each subcommand lives in its own file (cli_layout.cpp, cli_info.cpp, later cli_run.cpp,
// cli_bench.cpp) and exposes one function returning its Subcommand: a CommandSpec (name, usage,
// options, help text; see args.hpp) and a run function. main.cpp lists those functions in one
// table, parses the arguments against the spec, answers --help itself and turns UsageError into
// exit status 2, so a subcommand only does its work. To add one: write cli_NAME.cpp defining
// `const Subcommand &NAME_subcommand()`, declare it below, add it to kSubcommands in main.cpp.
#pragma once

#include "cli/args.hpp"

namespace pstate::cli {

// Exit statuses every subcommand uses.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the work failed (a peer died, a transport error, ...)
inline constexpr int kExitUsage = 2;    // bad arguments or an invalid configuration

struct Subcommand {
  const CommandSpec &spec;
  int (*run)(const ParsedArgs &args);  // returns an exit status; may throw UsageError
};

const Subcommand &layout_subcommand();
const Subcommand &info_subcommand();
const Subcommand &run_subcommand();
const Subcommand &bench_subcommand();
const Subcommand &doctor_subcommand();
const Subcommand &store_subcommand();

}  // namespace pstate::cli
