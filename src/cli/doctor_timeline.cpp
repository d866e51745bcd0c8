// doctor_timeline.cpp — `pstate doctor --timeline FILE`: the entries of every rank on one time
// axis, so a person sees who waited for whom.
//
// FILE.json is Chrome/Perfetto trace-event JSON (open it in ui.perfetto.dev or chrome://tracing):
// one process per rank ("rank R (host, pid P)"), one thread per group (plus "lifecycle"), one
// complete event per entry with ts/dur in microseconds from the earliest posted time; an entry
// still pending at the dump lasts until that rank's dump and is named "... (stuck)".
// FILE.png is drawn by gnuplot (found on PATH; its absence is an error, not a silent skip): one
// row per rank, a bar per entry coloured by op, stuck or failed entries red, the culprit's row
// labelled. Both are written to FILE.tmp.PID and renamed over FILE, so a reader never sees half.
#include "cli/doctor_analysis.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

namespace pstate::cli {
namespace {

bool ends_with(const std::string &s, const std::string &tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string tmp_name(const std::string &path) {
  return path + ".tmp." + std::to_string(::getpid());
}

void write_file(const std::string &path, const std::string &text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
}

void rename_over(const std::string &from, const std::string &to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    int err = errno;
    std::remove(from.c_str());
    throw std::runtime_error("cannot rename " + from + " to " + to + ": " + std::strerror(err));
  }
}

// The index of each (rank, gid) in d.groups (the diagnosis's group order), for thread ids.
int group_index(const Diagnosis &d, const TraceDump &dump, int gid) {
  const TraceGroup *g = dump.group(gid);
  for (size_t i = 0; g && i < d.groups.size(); ++i)
    if (d.groups[i].epoch == g->epoch && d.groups[i].name == g->name && d.groups[i].members == g->members)
      return static_cast<int>(i);
  return -1;
}

int64_t start_of_time(const JobDumps &job) {
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const TraceDump &d : job.dumps) {
    t0 = std::min(t0, d.dumped_ns);
    for (const TraceEntry &e : d.entries) t0 = std::min(t0, e.posted_ns);
  }
  return t0;
}

// When an entry's bar ends: when it returned; a pending one at its rank's dump.
int64_t end_of(const TraceDump &d, const TraceEntry &e) {
  int64_t end = e.ended_ns != kNone ? e.ended_ns : e.pending() ? d.dumped_ns : e.posted_ns;
  return std::max(end, e.posted_ns);  // never before it began, whatever the clocks said
}

std::string entry_name(const TraceEntry &e) {
  std::string name = e.op + (e.seq != kNone ? " #" + std::to_string(e.seq) : "");
  if (e.pending())
    name += " (stuck)";
  else if (e.failed())
    name += " (" + e.status + ")";
  return name;
}

std::string micros(int64_t ns) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1e3);
  return buf;
}

// ---- trace-event JSON -----------------------------------------------------------------------

std::string timeline_json(const JobDumps &job, const Diagnosis &diag) {
  int64_t t0 = start_of_time(job);
  std::vector<std::string> events;
  auto meta = [&](const char *what, int pid, int tid, const std::string &name) {
    events.push_back(std::string("{\"ph\": \"M\", \"name\": \"") + what + "\", \"pid\": " + std::to_string(pid) +
                     ", \"tid\": " + std::to_string(tid) + ", \"args\": {\"name\": " + json_string(name) + "}}");
  };
  for (const TraceDump &d : job.dumps) {
    meta("process_name", d.rank, 0,
         "rank " + std::to_string(d.rank) + " (" + d.host + ", pid " + std::to_string(d.pid) + ")");
    events.push_back("{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " + std::to_string(d.rank) +
                     ", \"tid\": 0, \"args\": {\"sort_index\": " + std::to_string(d.rank) + "}}");
    meta("thread_name", d.rank, 0, "lifecycle");
    for (const TraceGroup &g : d.groups) {
      const int index = group_index(diag, d, g.gid);  // every dump's group is one of the diagnosis's
      meta("thread_name", d.rank, index + 1, index >= 0 ? diag.groups[static_cast<size_t>(index)].label : g.name);
    }
    for (const TraceEntry &e : d.entries) {
      int tid = e.gid < 0 ? 0 : group_index(diag, d, e.gid) + 1;
      std::string args = "\"class\": " + json_string(e.cls);
      args += ", \"seq\": " + (e.seq == kNone ? std::string("null") : std::to_string(e.seq));
      args += ", \"count\": " + (e.count == kNone ? std::string("null") : std::to_string(e.count));
      args += ", \"dtype\": " + json_string(e.dtype) + ", \"redop\": " + json_string(e.redop);
      args += ", \"root\": " + std::to_string(e.root) + ", \"peer\": " + std::to_string(e.peer);
      args += ", \"state\": " + json_string(e.state) + ", \"status\": " + json_string(e.status);
      args += ", \"path\": " + json_string(e.path) + ", \"id\": " + std::to_string(e.id);
      events.push_back("{\"ph\": \"X\", \"name\": " + json_string(entry_name(e)) + ", \"cat\": " + json_string(e.cls) +
                       ", \"pid\": " + std::to_string(d.rank) + ", \"tid\": " + std::to_string(tid) +
                       ", \"ts\": " + micros(e.posted_ns - t0) + ", \"dur\": " + micros(end_of(d, e) - e.posted_ns) +
                       ", \"args\": {" + args + "}}");
    }
    events.push_back("{\"ph\": \"i\", \"s\": \"p\", \"name\": " + json_string("dump: " + d.reason) + ", \"pid\": " +
                     std::to_string(d.rank) + ", \"tid\": 0, \"ts\": " + micros(d.dumped_ns - t0) + "}");
  }
  std::string out = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"job\": " + json_string(job.job) +
                    ", \"verdict\": " + json_string(diag.verdict) + "}, \"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) out += events[i] + (i + 1 < events.size() ? ",\n" : "\n");
  return out + "]}\n";
}

// ---- gnuplot PNG --------------------------------------------------------------------------------

std::string find_on_path(const std::string &program) {
  const char *path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A gnuplot single-quoted string ('' is a quote inside).
std::string gp_quote(const std::string &s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A title of several lines (at most `width` characters each, broken at spaces) as a gnuplot
// double-quoted string, where \n is a line break.
std::string gp_title(const std::string &s, size_t width = 120) {
  std::string out = "\"";
  size_t line = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t end = s.find(' ', i);
    if (end == std::string::npos) end = s.size();
    const std::string word = s.substr(i, end - i);
    if (line > 0 && line + 1 + word.size() > width) {
      out += "\\n";
      line = 0;
    } else if (line > 0) {
      out += ' ';
      ++line;
    }
    for (char c : word) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    line += word.size();
    i = end + 1;
  }
  return out + "\"";
}

// Runs `gnuplot script`; returns "" or what went wrong (its stderr).
std::string run_gnuplot(const std::string &gnuplot, const std::string &script, const std::string &err_file) {
  pid_t pid = ::fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    int fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execl(gnuplot.c_str(), gnuplot.c_str(), script.c_str(), static_cast<char *>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  std::ifstream err(err_file);
  std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  return "gnuplot failed (" +
         (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : std::string("killed")) + ")" +
         (text.empty() ? "" : ":\n" + text);
}

const char *const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8"};
constexpr const char *kRed = "#d62728";

std::string gnuplot_script(const JobDumps &job, const Diagnosis &diag, const std::string &data,
                           const std::map<std::string, int> &op_colour, const std::string &terminal,
                           const std::string &output) {
  std::ostringstream gp;
  int rows = job.world;
  gp << "set terminal " << terminal << " size 1200," << 160 + 40 * rows << "\n";
  gp << "set termoption noenhanced\n";
  gp << "set output " << gp_quote(output) << "\n";
  gp << "set title " << gp_title(diag.verdict) << " font ',9'\n";
  gp << "set xlabel 'seconds since the first recorded call'\n";
  gp << "set yrange [" << rows - 0.5 << ":-0.5]\n";
  gp << "set ytics (";
  for (int r = 0; r < rows; ++r) {
    bool culprit = std::find(diag.culprits.begin(), diag.culprits.end(), r) != diag.culprits.end();
    bool missing = std::find(diag.missing.begin(), diag.missing.end(), r) != diag.missing.end();
    std::string label = "rank " + std::to_string(r) + (culprit ? " <- culprit" : "") + (missing ? " (no dump)" : "");
    gp << (r ? ", " : "") << gp_quote(label) << " " << r;
  }
  gp << ")\n";
  gp << "set grid xtics\nset key outside right top\nset style fill solid 0.85 border -1\n";
  gp << "plot " << gp_quote(data)
     << " using (($2+$3)/2):1:(($3-$2)/2):(0.35):4 with boxxyerror lc rgb variable notitle";
  for (const auto &[op, colour] : op_colour)
    gp << ", NaN with boxes lc rgb " << gp_quote(kPalette[colour % 10]) << " title " << gp_quote(op);
  gp << ", NaN with boxes lc rgb " << gp_quote(kRed) << " title 'stuck or failed'\n";
  return gp.str();
}

void write_png(const JobDumps &job, const Diagnosis &diag, const std::string &path) {
  std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty())
    throw std::runtime_error(
        "gnuplot is not on PATH: install it (Debian: apt-get install gnuplot-nox) or write "
        "the timeline as JSON (--timeline FILE.json)");
  char dir_template[] = "/tmp/pstate-doctor.XXXXXX";
  const char *tmp_dir = ::mkdtemp(dir_template);
  if (!tmp_dir) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  std::string dir = tmp_dir, data = dir + "/entries.dat", script = dir + "/timeline.gp", err = dir + "/gnuplot.err";

  int64_t t0 = start_of_time(job), span = 1;
  for (const TraceDump &d : job.dumps) span = std::max(span, d.dumped_ns - t0);
  std::map<std::string, int> op_colour;
  std::ostringstream rows;
  for (const TraceDump &d : job.dumps)
    for (const TraceEntry &e : d.entries) {
      auto it = op_colour.emplace(e.op, static_cast<int>(op_colour.size())).first;
      std::string colour = e.pending() || e.failed() ? kRed : kPalette[it->second % 10];
      double start = static_cast<double>(e.posted_ns - t0) / 1e9;
      double end =
          std::max(static_cast<double>(end_of(d, e) - t0) / 1e9, start + 0.004 * static_cast<double>(span) / 1e9);
      rows << d.rank << " " << start << " " << end << " " << std::stol(colour.substr(1), nullptr, 16) << "\n";
    }
  write_file(data, rows.str());
  std::string tmp = tmp_name(path), failure;
  for (const char *terminal : {"pngcairo", "png"}) {
    write_file(script, gnuplot_script(job, diag, data, op_colour, terminal, tmp));
    failure = run_gnuplot(gnuplot, script, err);
    if (failure.empty()) break;
  }
  for (const std::string &f : {data, script, err}) std::remove(f.c_str());
  ::rmdir(dir.c_str());
  if (!failure.empty()) {
    std::remove(tmp.c_str());
    throw std::runtime_error(failure);
  }
  rename_over(tmp, path);
}

}  // namespace

bool timeline_format_known(const std::string &path) {
  return ends_with(path, ".json") || ends_with(path, ".png");
}

void write_timeline(const JobDumps &job, const Diagnosis &d, const std::string &path) {
  if (ends_with(path, ".png")) {
    write_png(job, d, path);
    return;
  }
  std::string tmp = tmp_name(path);
  write_file(tmp, timeline_json(job, d));
  rename_over(tmp, path);
}

}  // namespace pstate::cli
