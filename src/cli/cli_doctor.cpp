// cli_doctor.cpp — `pstate doctor DIR`: reads the flight-recorder dumps every rank wrote
// (DIR/rank<R>.pstate-trace, docs/trace-format.md) and says which rank is stuck or wrong, on
// which group and operation, and why.
//
// For the person woken up by a hung job: the first line is the verdict, the lines under it the
// evidence per group and per rank; --json prints the same for tools; --timeline FILE.json|.png
// draws it. Exit status 0 nothing wrong, 1 a culprit or problem named, 2 unreadable input (no
// dumps, a torn or foreign file: refused with the file, the line and why, never half-read).
// Reading is trace_file.cpp's, the reasoning doctor_analysis.cpp's, pictures doctor_timeline.cpp's.
#include "cli/cli.hpp"
#include "cli/doctor_analysis.hpp"
#include "cli/trace_file.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace pstate::cli {
namespace {

namespace fs = std::filesystem;

constexpr OptionSpec kOptions[] = {
    {"--json", nullptr, "print the findings as one JSON object instead of text"},
    {"--timeline", "FILE", "also draw the entries of every rank: FILE.json (Perfetto/Chrome) or FILE.png (gnuplot)"},
};

constexpr CommandSpec kSpec{
    "doctor",
    "read the ranks' flight-recorder dumps and say which rank is stuck, and why",
    "DIR [--json] [--timeline FILE.json|FILE.png]",
    "Reads every *.pstate-trace file in DIR (the dumps each rank writes on a TIMEOUT, PEER_LOST,\n"
    "MISMATCH or ABORTED, when pstate run asks (through the job's store), on pstate_trace_dump, or\n"
    "on SIGUSR1 with PSTATE_TRACE_SIGNAL=1; docs/trace-format.md). The first\n"
    "line printed is the verdict: the rank(s) at fault, the group and the operation (a mismatched\n"
    "collective, a rank that never called what the others wait in, a rank that left no dump);\n"
    "the evidence per group and per rank follows. Dumps of other jobs in DIR are ignored: the job\n"
    "of the most recent dump is analysed.\n"
    "Exit status 0 nothing wrong, 1 a problem named, 2 unreadable input (no dumps, a torn or\n"
    "foreign file) or a timeline that could not be written.\n\n"
    "example: pstate doctor pstate-trace --timeline hang.json",
    kOptions,
    true,
};

// The *.pstate-trace files of dir, sorted; an unusable dir is a message, not an exception.
bool list_dumps(const std::string &dir, std::vector<std::string> *files, std::string *why) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    *why = dir + ": " + (fs::exists(dir, ec) ? "not a folder" : "no such folder");
    return false;
  }
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() > 13 && name.compare(name.size() - 13, 13, ".pstate-trace") == 0 && it->is_regular_file(ec))
      files->push_back((fs::path(dir) / name).string());
  }
  if (ec) {
    *why = dir + ": " + ec.message();
    return false;
  }
  std::sort(files->begin(), files->end());
  if (files->empty()) {
    *why = "no *.pstate-trace dumps in " + dir +
           " (the ranks write them to $PSTATE_TRACE_DIR, default ./pstate-trace, on a failed call, or when pstate run "
           "asks before it stops a job)";
    return false;
  }
  return true;
}

// A file named rank<R>.pstate-trace must hold rank R's dump.
void check_file_name(const TraceDump &d) {
  std::string name = fs::path(d.file).filename().string();
  constexpr size_t kPrefix = 4, kSuffix = 13;  // "rank", ".pstate-trace"
  if (name.rfind("rank", 0) != 0 || name.size() <= kPrefix + kSuffix) return;
  std::string digits = name.substr(kPrefix, name.size() - kPrefix - kSuffix);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return;
  if (digits != std::to_string(d.rank))
    throw TraceFormatError(d.file, 0,
                           "the file name says rank " + digits + ", the dump says rank " + std::to_string(d.rank));
}

void print_text(const Diagnosis &d) {
  std::printf("%s\n", d.verdict.c_str());
  for (const std::string &line : d.evidence) std::printf("%s\n", line.c_str());
}

int run_doctor(const ParsedArgs &args) {
  if (args.positional().size() != 1) throw UsageError("give one folder of dumps: pstate doctor DIR");
  const std::string &dir = args.positional()[0];
  std::optional<std::string> timeline = args.value("--timeline");
  if (timeline && !timeline_format_known(*timeline))
    throw UsageError("--timeline " + *timeline + ": the name must end in .json or .png (the format)");

  std::vector<std::string> files;
  std::string why;
  if (!list_dumps(dir, &files, &why)) {
    std::fprintf(stderr, "pstate doctor: %s\n", why.c_str());
    return kExitUsage;
  }
  JobDumps job;
  try {
    std::vector<TraceDump> dumps;
    for (const std::string &f : files) {
      dumps.push_back(read_trace_file(f));
      check_file_name(dumps.back());
    }
    job = select_job(std::move(dumps));
  } catch (const TraceFormatError &e) {
    std::fprintf(stderr, "pstate doctor: %s\n", e.what());
    return kExitUsage;
  }

  Diagnosis d = diagnose(job);
  if (args.flag("--json"))
    std::fputs(diagnosis_json(job, d).c_str(), stdout);
  else
    print_text(d);
  std::fflush(stdout);

  if (timeline) {
    try {
      write_timeline(job, d, *timeline);
    } catch (const std::exception &e) {
      std::fprintf(stderr, "pstate doctor: --timeline %s: %s\n", timeline->c_str(), e.what());
      return kExitUsage;
    }
  }
  return d.exit_status;
}

}  // namespace

const Subcommand &doctor_subcommand() {
  static const Subcommand sub{kSpec, run_doctor};
  return sub;
}

}  // namespace pstate::cli
