// trace_file.hpp — one flight-recorder dump (`pstate-trace 1`, docs/trace-format.md) read into
// plain structs, for `pstate doctor` (and any later reader).
//
// The reader is strict on purpose: a doctor that guesses at half a file names the wrong rank. A
// file whose first line is not `pstate-trace 1`, that lacks its `end` line (torn: copied while
// being written), whose `groups G` / `entries N` counts do not match the lines that follow, or
// with any malformed line is refused with TraceFormatError naming the file, the line and what is
// wrong. Header keys this version does not know are skipped (the format allows later additions).
// Numbers written as `-` ("none / not known") are kNone.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pstate::cli {

inline constexpr int64_t kNone = -1;  // a `-` field of a numeric column

// "FILE:LINE: what" — the dump cannot be used.
class TraceFormatError : public std::runtime_error {
 public:
  TraceFormatError(const std::string &file, int line, const std::string &what);
  const std::string &file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string file_;
  int line_;
};

struct TraceGroup {
  int gid = 0;       // number in this dump only (0 = world)
  std::string name;  // "world", "tp:0", ...
  int size = 0;
  int rank_in_group = 0;
  std::vector<int> members;  // global ranks in group order
  int64_t collectives = 0;   // collectives this rank started on the group (the next seq)
  int64_t epoch = 0;         // the world's epoch it was made in (the `epochs` header; 0 without one)
};

struct TraceEntry {
  int64_t id = 0;
  std::string cls;  // "coll", "p2p", "life"
  int gid = -1;     // -1: `-`
  int64_t seq = kNone;
  std::string op;
  int64_t count = kNone;
  std::string dtype, redop;  // "-" when none
  int root = -1, peer = -1;  // group ranks, -1 when none
  std::string path, state, status;
  int64_t posted_ns = kNone, ended_ns = kNone, dev_start_ns = kNone, dev_end_ns = kNone;
  int line = 0;  // line number in the file, for messages

  // Called and not finished: still in the call, or (CUDA, PSTATE_TRACE_CUDA_EVENTS=1) enqueued
  // and started on the stream but not ended there.
  bool pending() const {
    return state == "posted" || state == "started" ||
           (state == "enqueued" && dev_start_ns != kNone && dev_end_ns == kNone);
  }
  bool failed() const { return state == "failed"; }
  bool is_send() const { return cls == "p2p" && op.rfind("send", 0) == 0; }
  // The point-to-point stream it is numbered on: objects and tensor dicts (1), tensors (0).
  int stream() const {
    return op.find("object") != std::string::npos || op.find("tensor_dict") != std::string::npos ? 1 : 0;
  }
};

struct TraceDump {
  std::string file;  // as given to the reader
  std::string job, host;
  int64_t pid = 0;
  int rank = 0, world = 0;
  std::string device, reason;
  int64_t dumped_ns = 0;
  std::string in_call;  // "-" when idle outside pstate
  int64_t in_call_since_ns = kNone;
  std::string failure;  // "-" when none
  int64_t capacity = 0, recorded = 0, dropped = 0;
  // `epochs E:G,...` (optional): the world was rebuilt at epoch E (pstate_shrink, pstate_grow, a
  // replacement's init) and gid G was its first group; ascending. Empty: every group is of epoch 0.
  std::vector<std::pair<int64_t, int64_t>> epochs;
  int64_t epoch = 0;        // the latest epoch of this dump (its current world's)
  int64_t first_epoch = 0;  // the epoch of its first group: > 0 for a replacement process (it joined then)
  std::vector<TraceGroup> groups;
  std::vector<TraceEntry> entries;

  const TraceGroup *group(int gid) const;
};

// Parses the text of one dump; `file` names it in errors. Throws TraceFormatError.
TraceDump parse_trace(const std::string &text, const std::string &file);

// Reads and parses one file. Throws TraceFormatError (also when it cannot be read).
TraceDump read_trace_file(const std::string &path);

}  // namespace pstate::cli
