// doctor_analysis.hpp — what `pstate doctor` concludes from the dumps of one job: which rank is
// stuck or wrong, on which group and operation, and the evidence, as data (findings, progress)
// and as the words the command prints. Reading files is trace_file.hpp's; printing and options
// are cli_doctor.cpp's; pictures are doctor_timeline.cpp's. Kept free of I/O so the rules can be
// read (and changed) in one place.
#pragma once

#include "cli/trace_file.hpp"

#include <map>
#include <string>
#include <vector>

namespace pstate::cli {

// The dumps of the job to analyse (the job of the most recently written dump), by rank.
struct JobDumps {
  std::string job;
  int world = 0;
  std::vector<TraceDump> dumps;  // one per rank, sorted by rank
  int ignored_dumps = 0;         // dumps of other jobs in the same folder
  std::vector<std::string> ignored_jobs;
};

// Picks the job of the dump with the latest dumped_unix_ns and keeps its dumps. Throws
// TraceFormatError (line 0) when two dumps claim the same rank or disagree on the world size.
JobDumps select_job(std::vector<TraceDump> all);

struct Finding {
  std::string kind;                // "mismatch", "behind", "missing", "stuck", "failed"
  std::string group;               // group name, "" when none
  int64_t seq = kNone;             // the collective's (or p2p transfer's) number, kNone when none
  std::string op;                  // "" when none
  std::vector<int> ranks;          // the ranks the finding names (odd, behind, missing)
  std::vector<int> waiting_ranks;  // the ranks that waited for them
  int64_t epoch = 0;               // the epoch of the group's world (see GroupProgress)
  std::string text;                // one sentence
};

struct GroupProgress {
  std::string name;
  std::vector<int> members;
  // The world's epoch the group was made in: pstate_shrink and pstate_grow rebuild the world and
  // its groups (same names, new epoch); groups are told apart by (epoch, name, members).
  int64_t epoch = 0;
  std::string label;  // the name in the doctor's sentences: "tp:0", or "tp:0 (epoch 1)" in a job with epochs
  std::map<int, int64_t> collectives;  // rank -> `collectives` of its group line (ranks with a dump)
};

struct Diagnosis {
  std::string verdict;  // the first line, starting "pstate doctor: "
  int exit_status = 0;  // 0 nothing wrong, 1 a culprit or problem named
  std::vector<int> culprits;
  std::vector<int> missing;       // ranks 0..world-1 without a dump
  std::vector<Finding> findings;  // the verdict's finding first
  std::vector<GroupProgress> groups;
  std::vector<std::string> evidence;  // the lines printed under the verdict
  // A job whose world was rebuilt (pstate_shrink / pstate_grow): the latest epoch of any dump.
  // Stalls, failures and deaths in groups of earlier epochs are history the survivors recovered
  // from: they are listed (findings of kind "recovered", after the others) but decide nothing.
  int64_t epoch = 0;
};

Diagnosis diagnose(const JobDumps &job);

// The whole diagnosis as one JSON object (see docs/cli.md for its keys), with a final newline.
std::string diagnosis_json(const JobDumps &job, const Diagnosis &d);

// ---- the timeline (doctor_timeline.cpp) ----

// Whether `path` names a timeline this build writes: ".json" (Chrome/Perfetto trace events) or
// ".png" (drawn by gnuplot).
bool timeline_format_known(const std::string &path);

// Writes the timeline atomically (PATH.tmp.PID, then renamed over PATH). Throws
// std::runtime_error saying why it could not (gnuplot not on PATH, gnuplot failed, I/O).
void write_timeline(const JobDumps &job, const Diagnosis &d, const std::string &path);

// Text helpers shared with the timeline.
std::string json_string(const std::string &s);
std::string rank_list(const std::vector<int> &ranks);  // "0, 1, 3"

}  // namespace pstate::cli
