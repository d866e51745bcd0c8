// trace.hpp — the flight recorder: every rank's last operations, always on, cheap enough for the
// 8 B all_reduce fast path, dumped to a file when something goes wrong, so that a hang or a
// timeout names the rank to blame.
//
// A job that hangs or times out rarely says which rank is to blame: the rank whose decision is
// needed is the one that cannot report. So every context keeps a fixed ring of its last
// PSTATE_TRACE_ENTRIES operations (default 4096; 0 turns the recorder off): collectives,
// point-to-point, objects, tensor dicts, barriers, communicator creation, graph capture and
// lifecycle steps, with the group, a per-group sequence number, what was called, what carries it,
// its state and times. When a call fails with TIMEOUT, PEER_LOST, MISMATCH or ABORTED, when a
// dump is asked for through the job's store (group/dump_watcher.hpp), on pstate_trace_dump, and
// on SIGUSR1 where PSTATE_TRACE_SIGNAL=1 installed its handler (trace_signal.cpp: a watchdog
// thread, nothing allocated in the handler), the ring is written to $PSTATE_TRACE_DIR/rank<R>.pstate-trace in the format
// of docs/trace-format.md, which `pstate doctor` reads.
//
// Cost: one entry is eight 64-bit words written with relaxed atomic stores (plain moves on x86)
// plus a load of the cached clock; completing it is two more stores and another load. The owning thread
// writes (one thread at a time drives a context); a dumping thread reads concurrently: each entry
// carries its id, set to 0 while the entry is rewritten and to the new id after (with release),
// and the reader keeps an entry only when it read the same nonzero id before and after the other
// words (a seqlock whose words are atomics, so the race is defined and TSan-clean).
//
// Times are taken on the recorder's clock (trace_ticks: the coarse monotonic clock, cached) and
// turned into wall-clock nanoseconds when a dump is written, from the anchor where both clocks
// were read at the recorder's creation.
#pragma once

#include "common/op_descriptor.hpp"

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <time.h>

namespace pstate {

// The flight recorder's clock: CLOCK_MONOTONIC_COARSE in ns, as the process's watchdog thread
// (trace_signal.cpp) last read it; it refreshes it every 2 ms while any recorder lives. Reading
// it is one load of a line that changes every 2 ms (~1 ns), where clock_gettime costs ~4 ns
// (coarse), ~10 ns (TSC) or ~30 ns (kvm-clock) here, and two reads per operation must stay within
// 2% of a 0.45 us all_reduce (bench/trace_cost.sh). Its resolution (2-4 ms) is plenty to tell which
// rank waits since when in a hang (seconds). Device times (PSTATE_TRACE_CUDA_EVENTS=1) come from
// CUDA events.
struct alignas(64) TraceClock {
  std::atomic<uint64_t> ns{0};
};
inline TraceClock g_trace_clock;
inline uint64_t trace_coarse_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
inline uint64_t trace_ticks() {
  return g_trace_clock.ns.load(std::memory_order_relaxed);
}

enum class TraceClass : uint8_t { kColl = 0, kP2P = 1, kLife = 2 };
enum class TracePath : uint8_t { kNone = 0, kShm, kUcx, kNccl, kLocal };
enum class TraceState : uint8_t { kPosted = 0, kStarted, kEnqueued, kCompleted, kFailed };

// Operation names of the dump (docs/trace-format.md "op"); the collective kinds 1..16 come first
// in the order of OpKind so that they convert by value; later kinds were appended at the end
// (trace_op_of converts any kind).
enum class TraceOp : uint8_t {
  kNone = 0,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kGather,
  kAllToAll,
  kBarrier,
  kBroadcastObject,
  kAllGatherObject,
  kSend,
  kRecv,
  kDeviceCommInit,
  kFinalizeBarrier,
  kDestroyBarrier,
  kReduce,
  kScatter,  // = OpKind 1..16
  kSendObject,
  kRecvObject,
  kSendTensorDict,
  kRecvTensorDict,
  kBroadcastTensorDict,
  kInit,
  kInitializeModelParallel,
  kDestroyModelParallel,
  kFinalize,
  kAbort,
  kGraphCaptureBegin,
  kGraphCaptureEnd,
  kAllGatherV,      // OpKind::kAllGatherV
  kReduceScatterV,  // OpKind::kReduceScatterV
  kShrink,
  kGrow,
  // pstate's own exchanges (OpKind::kNewGroup..kGrowDecision, in that order)
  kNewGroup,
  kModelParallelConfig,
  kModelParallelReady,
  kDestroyExchange,
  kTensorDictMeta,
  kTensorDictAgree,
  kSlicedDictAgree,
  kGrowDecision,
  kRefused,
  kMemAlloc,    // OpKind::kMemAlloc..kMemReserve, in that order
  kMemFree,
  kMemReserve,
  kAllToAllV,  // OpKind::kAllToAllV
  kCount
};
const char *trace_op_name(TraceOp op);

// The trace op of an OpKind (OpDescriptor::op).
inline TraceOp trace_op_of(uint32_t op_kind) {
  if (op_kind == static_cast<uint32_t>(OpKind::kAllGatherV)) return TraceOp::kAllGatherV;
  if (op_kind == static_cast<uint32_t>(OpKind::kReduceScatterV)) return TraceOp::kReduceScatterV;
  if (op_kind == static_cast<uint32_t>(OpKind::kAllToAllV)) return TraceOp::kAllToAllV;
  if (internal_kind(op_kind) && op_kind <= static_cast<uint32_t>(OpKind::kLast))
    return static_cast<TraceOp>(static_cast<uint32_t>(TraceOp::kNewGroup) + op_kind -
                                static_cast<uint32_t>(OpKind::kNewGroup));
  return op_kind <= static_cast<uint32_t>(TraceOp::kScatter) ? static_cast<TraceOp>(op_kind) : TraceOp::kNone;
}

// One group as the recorder knows it (kept after the group is destroyed: its entries name it).
struct TraceGroup {
  int gid = 0;
  std::string name;
  std::vector<int> members;  // global ranks in group order
  int rank_in_group = -1;
  std::atomic<uint64_t> collectives{0};  // the next collective's seq
  // p2p seq per stream and peer (index stream * members + peer; the tensor stream 0, objects and
  // tensor dicts 1, as common/p2p_message_kind.hpp; owner thread only)
  std::vector<uint32_t> sent, received;
};

// What a dump says besides the entries: facts of the context, set as they become known.
struct TraceFacts {
  std::string job = "-";
  int rank = -1;
  int world = 0;
  const char *device = "cpu";
};

class TraceRecorder {
 public:
  // entries: ring capacity (> 0; rounded up to a power of two). dir: where dumps go ("" = PSTATE_TRACE_DIR or
  // ./pstate-trace).
  TraceRecorder(size_t entries, std::string dir);
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder &) = delete;
  TraceRecorder &operator=(const TraceRecorder &) = delete;

  // PSTATE_TRACE_ENTRIES (default 4096, 0 = off: returns nullptr), PSTATE_TRACE_DIR.
  static std::unique_ptr<TraceRecorder> from_env();

  void set_facts(const TraceFacts &f);
  // Where a dump gets device times of CUDA entries (DeviceContext::trace_times); nullptr: none.
  // Cleared before the device context goes away.
  using DeviceTimes = std::function<bool(uint64_t id, int64_t *start_unix_ns, int64_t *end_unix_ns)>;
  void set_device_times(DeviceTimes fn);
  void set_failure(const std::string &why);
  void clear_failure();  // pstate_shrink / pstate_grow made the context usable again
  // The world was (re)built at this epoch (pstate_shrink, pstate_grow, a replacement's init): the
  // groups added from now on belong to it. A dump lists the epochs with their first gid (the
  // `epochs` header line) so that a reader tells a rebuilt world's groups from the old ones.
  void begin_epoch(uint32_t epoch);
  // The group's record; gid = its position in the dump. Stable address until the recorder dies.
  TraceGroup *add_group(const std::string &name, const std::vector<int> &members, int rank_in_group);

  // The C entry point a thread entered last (a static string), and the context's flag that says
  // whether a thread is inside a call now (Context::try_enter): a dump shows the call while the
  // flag is set, so leaving a call costs the recorder nothing.
  void enter_call(const char *call) { in_call_.store(call, std::memory_order_relaxed); }
  void set_busy_flag(const std::atomic<bool> *busy) { busy_ = busy; }

  // Records a new entry (state posted) and returns its handle for the updates below. gid -1:
  // none. seq UINT64_MAX / count UINT64_MAX / dtype, redop, root, peer -1: none.
  uint64_t begin(TraceClass cls, TraceOp op, const TraceGroup *group, uint64_t seq, uint64_t count, int dtype,
                 int redop, int root, int peer, TracePath path) {
    const uint64_t id = recorded_.load(std::memory_order_relaxed) + 1;
    Slot &s = ring_[(id - 1) & mask_];
    s.id.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.meta.store(static_cast<uint64_t>(op) | static_cast<uint64_t>(cls) << 8 | static_cast<uint64_t>(path) << 12 |
                     static_cast<uint64_t>(static_cast<uint8_t>(static_cast<uint32_t>(dtype) + 1U)) << 16 |
                     static_cast<uint64_t>(static_cast<uint8_t>(static_cast<uint32_t>(redop) + 1U)) << 24 |
                     static_cast<uint64_t>(group != nullptr ? group->gid + 1 : 0) << 32,
                 std::memory_order_relaxed);
    s.state.store(static_cast<uint64_t>(TraceState::kPosted), std::memory_order_relaxed);
    s.seq.store(seq, std::memory_order_relaxed);
    s.count.store(count, std::memory_order_relaxed);
    s.ends.store(static_cast<uint64_t>(static_cast<uint32_t>(root) + 1U) |
                     static_cast<uint64_t>(static_cast<uint32_t>(peer) + 1U) << 32,
                 std::memory_order_relaxed);
    s.posted.store(trace_ticks(), std::memory_order_relaxed);  // `ended` is read only once ended
    s.id.store(id, std::memory_order_release);
    recorded_.store(id, std::memory_order_release);
    // The next entry's line, fetched for writing now: its miss (the ring is larger than L1) is
    // paid while this call runs, not by the next call, whose first fence would wait for it.
    __builtin_prefetch(&ring_[id & mask_], 1, 3);
    return id;
  }
  // Agreed with the peers: data is moving (CPU), or on the stream (CUDA: kEnqueued, ends it).
  void started(uint64_t id) { set_state(id, TraceState::kStarted, 0, false); }
  void enqueued(uint64_t id) { set_state(id, TraceState::kEnqueued, 0, true); }
  void completed(uint64_t id) { set_state(id, TraceState::kCompleted, 0, true); }
  void failed(uint64_t id, int status) { set_state(id, TraceState::kFailed, status, true); }
  // A call's path known only once it runs (shared memory or UCX inside a shm group).
  void set_path(uint64_t id, TracePath path);

  // Collective sequence and p2p numbering of a group (owner thread).
  static uint64_t next_coll(TraceGroup *g) {  // one writer: no locked read-modify-write
    const uint64_t n = g->collectives.load(std::memory_order_relaxed);
    g->collectives.store(n + 1, std::memory_order_relaxed);
    return n;
  }
  // objects: the object stream (send_object/recv_object, tensor dicts), else the tensor stream.
  static uint64_t next_p2p(TraceGroup *g, int peer, bool sending, bool objects = false);

  // Writes the dump (any thread; concurrent dumps are serialized). path: "" = the default file
  // (dir/rank<R>.pstate-trace); an existing directory = rank<R>.pstate-trace in it; else the file.
  // Returns the file written; throws pstate::Error on an I/O failure.
  std::string dump(const std::string &reason, const std::string &path = "");
  // dump() for the failure paths: never throws (an I/O error is logged by the caller's logger via
  // the return value: "" when nothing was written, with *error set).
  std::string dump_noexcept(const std::string &reason, std::string *error) noexcept;

  // gid 0 (the world group) once registered; owner thread.
  const TraceGroup *world_group() const { return groups_.empty() ? nullptr : &groups_.front(); }
  size_t capacity() const { return capacity_; }
  uint64_t recorded() const { return recorded_.load(std::memory_order_acquire); }
  const std::string &dir() const { return dir_; }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> id{0};
    std::atomic<uint64_t> meta{0};   // op | class << 8 | path << 12 | dtype+1 << 16 | redop+1 << 24 | gid+1 << 32
    std::atomic<uint64_t> state{0};  // state | (uint8)status << 8
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> ends{0};    // root+1 | peer+1 << 32
    std::atomic<uint64_t> posted{0};  // ticks
    std::atomic<uint64_t> ended{0};   // ticks, 0 = running
  };
  // The slot of entry id, or nullptr when the ring has moved past it.
  Slot *slot_of(uint64_t id) {
    const uint64_t newest = recorded_.load(std::memory_order_relaxed);
    if (id == 0 || id > newest || newest - id >= capacity_) return nullptr;
    return &ring_[(id - 1) & mask_];
  }
  void set_state(uint64_t id, TraceState st, int status, bool end) {
    Slot *s = &ring_[(id - 1) & mask_];  // the owner thread alone rewrites ids: one load checks it
    if (id == 0 || s->id.load(std::memory_order_relaxed) != id) return;
    if (end) s->ended.store(trace_ticks(), std::memory_order_relaxed);
    s->state.store(static_cast<uint64_t>(st) | static_cast<uint64_t>(static_cast<uint8_t>(status)) << 8,
                   std::memory_order_release);
  }
  std::string default_file() const;

  const size_t capacity_;  // a power of two
  const size_t mask_;
  std::unique_ptr<Slot[]> ring_;
  std::atomic<uint64_t> recorded_{0};
  std::atomic<const char *> in_call_{nullptr};
  const std::atomic<bool> *busy_ = nullptr;
  std::string dir_;
  // Anchor for ticks -> wall clock (see the top of this file).
  uint64_t ticks0_ = 0;
  int64_t unix_ns0_ = 0;

  mutable std::mutex mutex_;  // facts, failure, groups (registration and dump), one dump at a time
  TraceFacts facts_;
  DeviceTimes device_times_;
  std::string failure_ = "-";
  std::deque<TraceGroup> groups_;
  std::vector<std::pair<uint32_t, size_t>> epochs_;  // (epoch, first gid), ascending; empty: all epoch 0
};

// A recorder registered with the SIGUSR1 route below for as long as it lives.
struct TraceRecorderDeleter {
  void operator()(TraceRecorder *r) const;
};
using TracePtr = std::unique_ptr<TraceRecorder, TraceRecorderDeleter>;
// TraceRecorder::from_env(), registered (nullptr when the recorder is off).
TracePtr make_trace_recorder();

// The process-wide watchdog (trace_signal.cpp): recorders register while their context lives; the
// first registration starts the watchdog thread, which refreshes the clock every 2 ms and dumps
// every registered recorder when SIGUSR1 arrives, and installs the SIGUSR1 handler (only with
// PSTATE_TRACE_SIGNAL=1, and only over SIG_DFL); the last unregistration stops the thread.
void trace_register(TraceRecorder *r);
void trace_unregister(TraceRecorder *r);

}  // namespace pstate
