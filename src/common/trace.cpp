// trace.cpp — the flight recorder's slow side: creation from the environment, group records and
// the dump writer (docs/trace-format.md). The fast side (recording) is inline in trace.hpp.
#include "common/trace.hpp"

#include "common/error.hpp"

#include <pstate/pstate.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <utility>
#include <vector>

namespace pstate {
namespace {

int64_t clock_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

size_t round_up_pow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// "TIMEOUT" for PSTATE_ERR_TIMEOUT, "OK" for PSTATE_OK.
std::string status_word(int status) {
  const char *s = pstate_status_string(static_cast<pstate_status_t>(status));
  if (std::strncmp(s, "PSTATE_ERR_", 11) == 0) return s + 11;
  if (std::strncmp(s, "PSTATE_", 7) == 0) return s + 7;
  return s;
}

const char *path_word(TracePath p) {
  switch (p) {
    case TracePath::kShm:
      return "shm";
    case TracePath::kUcx:
      return "ucx";
    case TracePath::kNccl:
      return "nccl";
    case TracePath::kLocal:
      return "local";
    case TracePath::kNone:
      break;
  }
  return "-";
}

const char *state_word(TraceState s) {
  switch (s) {
    case TraceState::kPosted:
      return "posted";
    case TraceState::kStarted:
      return "started";
    case TraceState::kEnqueued:
      return "enqueued";
    case TraceState::kCompleted:
      return "completed";
    case TraceState::kFailed:
      return "failed";
  }
  return "posted";
}

const char *class_word(TraceClass c) {
  switch (c) {
    case TraceClass::kColl:
      return "coll";
    case TraceClass::kP2P:
      return "p2p";
    case TraceClass::kLife:
      return "life";
  }
  return "coll";
}

// One line of text without newlines (reasons and failures are free text).
std::string one_line(const std::string &s) {
  std::string out = s.empty() ? "-" : s;
  for (char &c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

void mkdir_p(const std::string &dir) {
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    prefix = dir.substr(0, pos);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "flight recorder: cannot create the dump folder ", prefix, ": ",
                  std::strerror(errno), " (set PSTATE_TRACE_DIR to a writable folder)");
  }
}

bool is_directory(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

const char *trace_op_name(TraceOp op) {
  static const char *const kNames[] = {"-",
                                       "all_reduce",
                                       "all_gather",
                                       "reduce_scatter",
                                       "broadcast",
                                       "gather",
                                       "all_to_all",
                                       "barrier",
                                       "broadcast_object",
                                       "all_gather_object",
                                       "send",
                                       "recv",
                                       "device_comm_init",
                                       "finalize_barrier",
                                       "destroy_barrier",
                                       "reduce",
                                       "scatter",
                                       "send_object",
                                       "recv_object",
                                       "send_tensor_dict",
                                       "recv_tensor_dict",
                                       "broadcast_tensor_dict",
                                       "init",
                                       "initialize_model_parallel",
                                       "destroy_model_parallel",
                                       "finalize",
                                       "abort",
                                       "graph_capture_begin",
                                       "graph_capture_end",
                                       "all_gatherv",
                                       "reduce_scatterv",
                                       "shrink",
                                       "grow",
                                       "new_group",
                                       "model_parallel_config",
                                       "model_parallel_ready",
                                       "destroy_exchange",
                                       "tensor_dict_meta",
                                       "tensor_dict_agree",
                                       "sliced_dict_agree",
                                       "grow_decision",
                                       "refused",
                                       "mem_alloc",
                                       "mem_free",
                                       "mem_reserve",
                                       "all_to_all_v"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(TraceOp::kCount));
  const auto i = static_cast<size_t>(op);
  return i < static_cast<size_t>(TraceOp::kCount) ? kNames[i] : "-";
}

TraceRecorder::TraceRecorder(size_t entries, std::string dir)
    : capacity_(round_up_pow2(entries)), mask_(capacity_ - 1), ring_(new Slot[capacity_]), dir_(std::move(dir)) {
  ticks0_ = trace_coarse_now();
  unix_ns0_ = clock_ns(CLOCK_REALTIME_COARSE);  // the same tick as ticks0_
}

TraceRecorder::~TraceRecorder() = default;

std::unique_ptr<TraceRecorder> TraceRecorder::from_env() {
  size_t entries = 4096;
  if (const char *v = std::getenv("PSTATE_TRACE_ENTRIES"); v != nullptr && *v != '\0') {
    char *end = nullptr;
    errno = 0;
    long long n = std::strtoll(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < 0 || n > (1ll << 24))
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_TRACE_ENTRIES='", v,
                  "': expected the flight recorder's ring size, 0..16777216 (0 turns it off; default 4096)");
    entries = static_cast<size_t>(n);
  }
  if (entries == 0) return nullptr;
  std::string dir = "pstate-trace";
  if (const char *v = std::getenv("PSTATE_TRACE_DIR"); v != nullptr && *v != '\0') dir = v;
  return std::make_unique<TraceRecorder>(entries, dir);
}

void TraceRecorder::set_facts(const TraceFacts &f) {
  std::lock_guard<std::mutex> lock(mutex_);
  facts_ = f;
  if (facts_.job.empty()) facts_.job = "-";
}

void TraceRecorder::set_device_times(DeviceTimes fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  device_times_ = std::move(fn);
}

void TraceRecorder::set_failure(const std::string &why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_ == "-") failure_ = one_line(why);
}

void TraceRecorder::clear_failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  failure_ = "-";
}

void TraceRecorder::begin_epoch(uint32_t epoch) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!epochs_.empty() && epochs_.back().second == groups_.size()) epochs_.pop_back();  // no group made in it
  epochs_.emplace_back(epoch, groups_.size());
}

TraceGroup *TraceRecorder::add_group(const std::string &name, const std::vector<int> &members, int rank_in_group) {
  std::lock_guard<std::mutex> lock(mutex_);
  TraceGroup &g = groups_.emplace_back();
  g.gid = static_cast<int>(groups_.size()) - 1;
  g.name = name;
  g.members = members;
  g.rank_in_group = rank_in_group;
  g.sent.assign(2 * members.size(), 0);
  g.received.assign(2 * members.size(), 0);
  return &g;
}

uint64_t TraceRecorder::next_p2p(TraceGroup *g, int peer, bool sending, bool objects) {
  auto &v = sending ? g->sent : g->received;
  const size_t n = v.size() / 2;
  if (peer < 0 || static_cast<size_t>(peer) >= n) return UINT64_MAX;
  return v[(objects ? n : 0) + static_cast<size_t>(peer)]++;
}

void TraceRecorder::set_path(uint64_t id, TracePath path) {
  Slot *s = slot_of(id);
  if (s == nullptr) return;
  uint64_t m = s->meta.load(std::memory_order_relaxed);
  s->meta.store((m & ~(uint64_t{0xf} << 12)) | static_cast<uint64_t>(path) << 12, std::memory_order_relaxed);
}

std::string TraceRecorder::default_file() const {
  return cat(dir_, "/rank", facts_.rank, ".pstate-trace");
}

std::string TraceRecorder::dump(const std::string &reason, const std::string &path_in) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t ticks_now = trace_coarse_now();
  // "dev_start dev_end" of a CUDA entry from its timing events, "- -" otherwise.
  auto device_times = [&](uint64_t id, TracePath path) -> std::string {
    int64_t start = -1, end = -1;
    if (path != TracePath::kNccl || !device_times_ || !device_times_(id, &start, &end)) return "- -";
    return cat(start >= 0 ? std::to_string(start) : "-", ' ', end >= 0 ? std::to_string(end) : "-");
  };
  auto unix_of = [&](uint64_t ticks) -> int64_t {
    return unix_ns0_ + (static_cast<int64_t>(ticks) - static_cast<int64_t>(ticks0_));
  };
  auto to_unix = [&](uint64_t ticks) -> std::string { return ticks == 0 ? "-" : std::to_string(unix_of(ticks)); };

  std::string file;
  if (path_in.empty()) {
    mkdir_p(dir_);
    file = default_file();
  } else if (is_directory(path_in)) {
    file = cat(path_in, "/rank", facts_.rank, ".pstate-trace");
  } else {
    file = path_in;
  }

  char host[256] = "-";
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "-");
  host[sizeof(host) - 1] = '\0';

  // Entries: oldest kept first.
  const uint64_t newest = recorded_.load(std::memory_order_acquire);
  const uint64_t oldest = newest > capacity_ ? newest - capacity_ + 1 : 1;
  // Entry lines by id; an entry the writer rewrote while this loop read it is left out, and so is
  // everything older than such a gap (the format promises ids without gaps, oldest first).
  std::vector<std::pair<uint64_t, std::string>> kept_lines;
  const char *call = busy_ != nullptr && busy_->load(std::memory_order_acquire) ? in_call_.load(std::memory_order_relaxed)
                                                                               : nullptr;
  std::string call_since = "-";
  for (uint64_t id = oldest; id <= newest; ++id) {
    Slot &s = ring_[(id - 1) & mask_];
    const uint64_t id1 = s.id.load(std::memory_order_acquire);
    const uint64_t st = s.state.load(std::memory_order_acquire);
    const uint64_t meta = s.meta.load(std::memory_order_relaxed);
    const uint64_t seq = s.seq.load(std::memory_order_relaxed);
    const uint64_t count = s.count.load(std::memory_order_relaxed);
    const uint64_t ends = s.ends.load(std::memory_order_relaxed);
    const uint64_t posted = s.posted.load(std::memory_order_relaxed);
    const uint64_t ended = s.ended.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (id1 != id || s.id.load(std::memory_order_relaxed) != id) {  // rewritten meanwhile
      kept_lines.clear();
      continue;
    }
    const auto op = static_cast<TraceOp>(meta & 0xff);
    const auto cls = static_cast<TraceClass>((meta >> 8) & 0xf);
    const auto path = static_cast<TracePath>((meta >> 12) & 0xf);
    const int dtype = static_cast<int>((meta >> 16) & 0xff) - 1;
    const int redop = static_cast<int>((meta >> 24) & 0xff) - 1;
    const int gid = static_cast<int>((meta >> 32) & 0xffff) - 1;
    const auto state = static_cast<TraceState>(st & 0xff);
    const int status = static_cast<int8_t>(static_cast<uint8_t>((st >> 8) & 0xff));
    const int root = static_cast<int>(static_cast<uint32_t>(ends & 0xffffffffu)) - 1;
    const int peer = static_cast<int>(static_cast<uint32_t>(ends >> 32)) - 1;
    const bool done = state == TraceState::kCompleted || state == TraceState::kFailed || state == TraceState::kEnqueued;
    auto num = [](uint64_t v) { return v == UINT64_MAX ? std::string("-") : std::to_string(v); };
    auto small = [](int v) { return v < 0 ? std::string("-") : std::to_string(v); };
    const char *dtn = dtype >= 0 ? pstate_dtype_name(static_cast<pstate_dtype_t>(dtype)) : nullptr;
    const char *opn = redop >= 0 ? pstate_reduce_op_name(static_cast<pstate_reduce_op_t>(redop)) : nullptr;
    kept_lines.emplace_back(id, std::string());
    kept_lines.back().second =
        cat("e ", id, ' ', class_word(cls), ' ', small(gid), ' ', num(seq), ' ', trace_op_name(op), ' ', num(count),
            ' ', dtn != nullptr ? dtn : "-", ' ', opn != nullptr ? opn : "-", ' ', small(root), ' ', small(peer), ' ',
            path_word(path), ' ', state_word(state), ' ', done ? status_word(status) : std::string("-"), ' ',
            to_unix(posted), ' ', done ? to_unix(ended) : std::string("-"), ' ', device_times(id, path), '\n');
    if (call != nullptr && !done) call_since = to_unix(posted);
  }
  std::string lines;
  for (const auto &kl : kept_lines) lines += kl.second;
  const size_t kept = kept_lines.size();

  std::string out =
      cat("pstate-trace 1\njob ", one_line(facts_.job), "\nhost ", one_line(host), "\npid ",
          static_cast<long>(::getpid()), "\nrank ", facts_.rank, "\nworld ", facts_.world, "\ndevice ", facts_.device,
          "\nreason ", one_line(reason), "\ndumped_unix_ns ", unix_of(ticks_now), "\nin_call ",
          call != nullptr ? call : "-", "\nin_call_since_unix_ns ", call_since, "\nfailure ", failure_, "\ncapacity ",
          capacity_, "\nrecorded ", newest, "\ndropped ", newest - kept, "\n");
  if (!epochs_.empty()) {
    out += "epochs";
    for (size_t i = 0; i < epochs_.size(); ++i) out += cat(i ? "," : " ", epochs_[i].first, ':', epochs_[i].second);
    out += '\n';
  }
  out += cat("groups ", groups_.size(), "\n");
  for (const TraceGroup &g : groups_) {
    std::string members;
    for (size_t i = 0; i < g.members.size(); ++i) members += cat(i ? "," : "", g.members[i]);
    out += cat("group ", g.gid, ' ', g.name, ' ', g.members.size(), ' ', g.rank_in_group, ' ', members, ' ',
               g.collectives.load(std::memory_order_relaxed), '\n');
  }
  out += cat("entries ", kept, '\n', lines, "end\n");

  const std::string tmp = cat(file, ".tmp.", static_cast<long>(::getpid()), '.', newest);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "flight recorder: cannot write ", tmp, ": ", std::strerror(errno),
                " (set PSTATE_TRACE_DIR to a writable folder)");
  size_t off = 0;
  while (off < out.size()) {
    ssize_t n = ::write(fd, out.data() + off, out.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "flight recorder: writing ", tmp, " failed: ", std::strerror(err));
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "flight recorder: cannot rename ", tmp, " to ", file, ": ",
                std::strerror(err));
  }
  return file;
}

std::string TraceRecorder::dump_noexcept(const std::string &reason, std::string *error) noexcept {
  try {
    return dump(reason);
  } catch (const std::exception &e) {
    if (error != nullptr) *error = e.what();
  } catch (...) {
    if (error != nullptr) *error = "unknown error";
  }
  return "";
}

}  // namespace pstate
