// trace_file.cpp — the strict reader of `pstate-trace 1` dumps (docs/trace-format.md).
//
// The order of checks is what makes the messages useful: first the first line (is it a dump at
// all?), then the `end` line (was the file torn while being copied?), then every line from the
// top, so the message names the first line that is wrong rather than a consequence of it.
#include "cli/trace_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace pstate::cli {

TraceFormatError::TraceFormatError(const std::string &file, int line, const std::string &what)
    : std::runtime_error(file + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + what),
      file_(file),
      line_(line) {}

const TraceGroup *TraceDump::group(int gid) const {
  for (const TraceGroup &g : groups)
    if (g.gid == gid) return &g;
  return nullptr;
}

namespace {

const std::set<std::string> kClasses = {"coll", "p2p", "life"};
const std::set<std::string> kStates = {"posted", "started", "enqueued", "completed", "failed"};
const std::set<std::string> kDtypes = {"int8",    "uint8",    "int32",   "uint32",  "int64", "uint64",
                                       "float16", "bfloat16", "float32", "float64", "-"};
const std::set<std::string> kRedops = {"sum", "prod", "min", "max", "avg", "-"};
// The header keys of version 1, all required; others are skipped.
const std::vector<std::string> kHeaderKeys = {"job",      "host",
                                              "pid",      "rank",
                                              "world",    "device",
                                              "reason",   "dumped_unix_ns",
                                              "in_call",  "in_call_since_unix_ns",
                                              "failure",  "capacity",
                                              "recorded", "dropped"};

// "abc..." for a line quoted in a message.
std::string quoted(const std::string &s) {
  constexpr size_t kMax = 60;
  return "'" + (s.size() > kMax ? s.substr(0, kMax) + "..." : s) + "'";
}

// Reads the lines of one dump in order; every error names the current line.
class Reader {
 public:
  Reader(const std::string &text, std::string file) : file_(std::move(file)) {
    size_t start = 0;
    while (start < text.size()) {
      size_t nl = text.find('\n', start);
      if (nl == std::string::npos) nl = text.size();
      lines_.push_back(text.substr(start, nl - start));
      start = nl + 1;
    }
  }

  [[noreturn]] void fail(const std::string &what) const { throw TraceFormatError(file_, line_no(), what); }
  int line_no() const { return static_cast<int>(next_); }  // 1-based number of the line last taken
  size_t line_count() const { return lines_.size(); }
  const std::vector<std::string> &lines() const { return lines_; }
  const std::string &file() const { return file_; }
  bool at_end() const { return next_ >= lines_.size(); }
  const std::string &peek() const { return lines_[next_]; }
  const std::string &take() {
    if (at_end()) throw TraceFormatError(file_, static_cast<int>(lines_.size()), "the file ends too early");
    return lines_[next_++];
  }

  // Splits on single spaces; an empty field (two spaces, a trailing space) is malformed.
  std::vector<std::string> fields(const std::string &line, size_t want, const char *what) const {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
      size_t sp = line.find(' ', start);
      out.push_back(line.substr(start, sp == std::string::npos ? std::string::npos : sp - start));
      if (out.back().empty()) fail(std::string("malformed ") + what + " line (empty field): " + quoted(line));
      if (sp == std::string::npos) break;
      start = sp + 1;
    }
    if (out.size() != want)
      fail(std::string("malformed ") + what + " line: " + std::to_string(out.size()) + " fields, expected " +
           std::to_string(want) + ": " + quoted(line));
    return out;
  }

  // A whole non-negative number, or kNone for "-" when allowed.
  int64_t number(const std::string &tok, const char *what, bool dash_ok = false) const {
    if (tok == "-") {
      if (dash_ok) return kNone;
      fail(std::string(what) + " is '-', a number is required here");
    }
    if (tok.empty() || tok.size() > 19 ||
        !std::all_of(tok.begin(), tok.end(), [](char c) { return c >= '0' && c <= '9'; }))
      fail(std::string(what) + " is not a number: " + quoted(tok));
    return std::stoll(tok);
  }

 private:
  std::string file_;
  std::vector<std::string> lines_;
  size_t next_ = 0;
};

void check_first_line(Reader &in) {
  if (in.at_end()) in.fail("empty file: not a pstate trace dump");
  const std::string &first = in.take();
  if (first == "pstate-trace 1") return;
  if (first.rfind("pstate-trace ", 0) == 0)
    in.fail("pstate-trace format version " + quoted(first.substr(13)) +
            ": this pstate reads version 1 (written by a newer pstate?)");
  in.fail("not a pstate trace dump: first line is " + quoted(first) + ", not 'pstate-trace 1'");
}

void check_not_torn(const Reader &in) {
  const auto &lines = in.lines();
  if (std::find(lines.begin(), lines.end(), "end") == lines.end())
    throw TraceFormatError(in.file(), static_cast<int>(lines.size()),
                           "torn: no end line (was it copied while being written?)");
}

// `epochs E:G,E:G,...`: epochs and first gids, both ascending.
void read_epochs(const Reader &in, const std::string &rest, TraceDump &d) {
  std::stringstream items(rest);
  for (std::string item; std::getline(items, item, ',');) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) in.fail("malformed epochs item (not EPOCH:GID): " + quoted(item));
    const int64_t epoch = in.number(item.substr(0, colon), "an epoch");
    const int64_t gid = in.number(item.substr(colon + 1), "an epoch's first gid");
    if (!d.epochs.empty() && (epoch <= d.epochs.back().first || gid < d.epochs.back().second))
      in.fail("epochs are not ascending: " + quoted(rest));
    d.epochs.emplace_back(epoch, gid);
  }
  if (d.epochs.empty()) in.fail("an empty epochs line");
  d.epoch = d.epochs.back().first;
  d.first_epoch = d.epochs.front().second == 0 ? d.epochs.front().first : 0;
}

// The header keys up to `groups`; unknown keys are skipped, known ones must each come once.
void read_header(Reader &in, TraceDump &d) {
  std::set<std::string> seen;
  while (!in.at_end() && in.peek().rfind("groups ", 0) != 0 && in.peek() != "end") {
    const std::string &line = in.take();
    size_t sp = line.find(' ');
    std::string key = line.substr(0, sp);
    std::string rest = sp == std::string::npos ? std::string() : line.substr(sp + 1);
    if (key.empty()) in.fail("malformed header line: " + quoted(line));
    if (key == "epochs") {  // optional (dumps of a job whose world was rebuilt)
      if (!seen.insert(key).second) in.fail("header key 'epochs' appears twice");
      read_epochs(in, rest, d);
      continue;
    }
    if (std::find(kHeaderKeys.begin(), kHeaderKeys.end(), key) == kHeaderKeys.end())
      continue;  // a later minor addition
    if (!seen.insert(key).second) in.fail("header key '" + key + "' appears twice");
    bool free_text = key == "reason" || key == "failure";
    if (rest.empty() || (!free_text && rest.find(' ') != std::string::npos))
      in.fail("malformed header line: " + quoted(line));
    if (key == "job")
      d.job = rest;
    else if (key == "host")
      d.host = rest;
    else if (key == "pid")
      d.pid = in.number(rest, "pid");
    else if (key == "rank")
      d.rank = static_cast<int>(in.number(rest, "rank"));
    else if (key == "world")
      d.world = static_cast<int>(in.number(rest, "world"));
    else if (key == "device")
      d.device = rest;
    else if (key == "reason")
      d.reason = rest;
    else if (key == "dumped_unix_ns")
      d.dumped_ns = in.number(rest, "dumped_unix_ns");
    else if (key == "in_call")
      d.in_call = rest;
    else if (key == "in_call_since_unix_ns")
      d.in_call_since_ns = in.number(rest, "in_call_since_unix_ns", true);
    else if (key == "failure")
      d.failure = rest;
    else if (key == "capacity")
      d.capacity = in.number(rest, "capacity");
    else if (key == "recorded")
      d.recorded = in.number(rest, "recorded");
    else if (key == "dropped")
      d.dropped = in.number(rest, "dropped");
  }
  if (in.at_end() || in.peek() == "end") {
    in.take();
    in.fail("no 'groups' line before the end of the header");
  }
  for (const std::string &key : kHeaderKeys)
    if (!seen.count(key)) {
      in.take();
      in.fail("the header lacks '" + key + "'");
    }
  if (d.world <= 0) in.fail("world is 0");
  if (d.rank >= d.world) in.fail("rank " + std::to_string(d.rank) + " is not below world " + std::to_string(d.world));
}

// `groups G` and its G group lines.
void read_groups(Reader &in, TraceDump &d) {
  auto head = in.fields(in.take(), 2, "groups");
  int64_t announced = in.number(head[1], "the group count");
  for (int64_t i = 0; i < announced; ++i) {
    if (in.at_end() || in.peek().rfind("group ", 0) != 0) {
      if (!in.at_end()) in.take();
      in.fail("'groups " + std::to_string(announced) + "' announced, but only " + std::to_string(i) +
              " group lines follow");
    }
    auto f = in.fields(in.take(), 7, "group");
    TraceGroup g;
    g.gid = static_cast<int>(in.number(f[1], "gid"));
    g.name = f[2];
    g.size = static_cast<int>(in.number(f[3], "size"));
    g.rank_in_group = static_cast<int>(in.number(f[4], "rank_in_group"));
    std::stringstream members(f[5]);
    for (std::string m; std::getline(members, m, ',');) g.members.push_back(static_cast<int>(in.number(m, "a member")));
    g.collectives = in.number(f[6], "collectives");
    for (const auto &[epoch, first_gid] : d.epochs)
      if (g.gid >= first_gid) g.epoch = epoch;
    if (d.group(g.gid)) in.fail("gid " + f[1] + " appears twice");
    if (g.size <= 0 || static_cast<int>(g.members.size()) != g.size)
      in.fail("group " + g.name + ": size " + f[3] + " but " + std::to_string(g.members.size()) + " members");
    if (g.rank_in_group >= g.size || g.members[g.rank_in_group] != d.rank)
      in.fail("group " + g.name + ": member " + f[4] + " is not this dump's rank " + std::to_string(d.rank));
    for (int m : g.members)
      if (m >= d.world) in.fail("group " + g.name + ": member " + std::to_string(m) + " is not below world");
    d.groups.push_back(std::move(g));
  }
  if (!in.at_end() && in.peek().rfind("group ", 0) == 0) {
    in.take();
    in.fail("more group lines than the 'groups " + std::to_string(announced) + "' announced");
  }
}

// A group rank (root, peer) of the entry's group, or -1 for "-".
int group_rank(const Reader &in, const TraceGroup *g, const std::string &tok, const char *what) {
  int64_t r = in.number(tok, what, true);
  if (r == kNone) return -1;
  if (!g || r >= g->size) in.fail(std::string(what) + " " + tok + " is not a rank of the entry's group");
  return static_cast<int>(r);
}

TraceEntry read_entry(Reader &in, const TraceDump &d) {
  auto f = in.fields(in.take(), 18, "e");
  TraceEntry e;
  e.line = in.line_no();
  e.id = in.number(f[1], "id");
  e.cls = f[2];
  if (!kClasses.count(e.cls)) in.fail("unknown class " + quoted(e.cls) + " (coll, p2p or life)");
  bool life = e.cls == "life";
  int64_t gid = in.number(f[3], "gid", life);
  const TraceGroup *g = nullptr;
  if (gid != kNone) {
    g = d.group(static_cast<int>(gid));
    if (!g) in.fail("gid " + f[3] + " has no group line");
    e.gid = static_cast<int>(gid);
  }
  e.seq = in.number(f[4], "seq", life);
  e.op = f[5];
  e.count = in.number(f[6], "count", true);
  e.dtype = f[7];
  if (!kDtypes.count(e.dtype)) in.fail("unknown dtype " + quoted(e.dtype));
  e.redop = f[8];
  if (!kRedops.count(e.redop)) in.fail("unknown redop " + quoted(e.redop));
  e.root = group_rank(in, g, f[9], "root");
  e.peer = group_rank(in, g, f[10], "peer");
  if (e.cls == "p2p" && e.peer < 0) in.fail("a p2p entry without a peer");
  e.path = f[11];
  e.state = f[12];
  if (!kStates.count(e.state)) in.fail("unknown state " + quoted(e.state));
  e.status = f[13];
  if (e.failed() && (e.status == "-" || e.status == "OK")) in.fail("a failed entry with status " + e.status);
  e.posted_ns = in.number(f[14], "posted_unix_ns");
  e.ended_ns = in.number(f[15], "ended_unix_ns", true);
  e.dev_start_ns = in.number(f[16], "dev_start_unix_ns", true);
  e.dev_end_ns = in.number(f[17], "dev_end_unix_ns", true);
  return e;
}

// `entries N`, N e lines (ids consecutive from dropped + 1), then `end` and nothing after it.
void read_entries(Reader &in, TraceDump &d) {
  if (in.at_end() || in.peek().rfind("entries ", 0) != 0) {
    in.take();
    in.fail("expected 'entries N' after the group lines");
  }
  auto head = in.fields(in.take(), 2, "entries");
  int64_t announced = in.number(head[1], "the entry count");
  for (int64_t i = 0; i < announced; ++i) {
    if (in.at_end() || in.peek().rfind("e ", 0) != 0) {
      if (!in.at_end()) in.take();
      in.fail("'entries " + std::to_string(announced) + "' announced, but only " + std::to_string(i) +
              " e lines follow");
    }
    TraceEntry e = read_entry(in, d);
    if (e.id != d.dropped + 1 + i)
      in.fail("entry id " + std::to_string(e.id) + ", expected " + std::to_string(d.dropped + 1 + i) +
              " (ids run from dropped + 1 without gaps)");
    d.entries.push_back(std::move(e));
  }
  if (in.at_end() || in.peek() != "end") {
    const std::string &line = in.take();
    in.fail(line.rfind("e ", 0) == 0 ? "more e lines than the 'entries " + std::to_string(announced) + "' announced"
                                     : "expected 'end', found " + quoted(line));
  }
  in.take();
  while (!in.at_end())
    if (!in.take().empty()) in.fail("text after the end line");
  if (d.recorded - d.dropped != announced)
    throw TraceFormatError(in.file(), 0,
                           "recorded " + std::to_string(d.recorded) + " - dropped " + std::to_string(d.dropped) +
                               " is not the " + std::to_string(announced) + " entries kept");
  if (announced > d.capacity)
    throw TraceFormatError(in.file(), 0, "more entries than the capacity " + std::to_string(d.capacity));
}

}  // namespace

TraceDump parse_trace(const std::string &text, const std::string &file) {
  Reader in(text, file);
  check_first_line(in);
  check_not_torn(in);
  TraceDump d;
  d.file = file;
  read_header(in, d);
  read_groups(in, d);
  read_entries(in, d);
  return d;
}

TraceDump read_trace_file(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw TraceFormatError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << f.rdbuf();
  if (f.bad()) throw TraceFormatError(path, 0, "cannot read");
  return parse_trace(text.str(), path);
}

}  // namespace pstate::cli
