// shm_group.cpp — ShmGroup set-up, segment layout, step synchronization, argument checks, and
// the public entry points that pick the protocol by size (algorithms in shm_group_inline.cpp and
// shm_group_staged.cpp; overview in shm_group.hpp).
//
// Segment payload layout (every part page-aligned):
//   controls: size() blocks of kControlStride bytes (one rank's counters; no two ranks write the
//             same cache line, and the adjacent-line prefetcher does not pair two ranks' lines)
//   inline  : size() * inline_depth slots of inline_lines 64-byte lines
//   areas   : size() * pipeline_depth staging areas of area_bytes_
#include "transport/shm/shm_group.hpp"

#include "common/arith.hpp"
#include "reduce/reduce.hpp"
#include "transport/shm/shm_group_layout.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <vector>

namespace pstate::shm {
namespace {

// 4: line words carry the call code; 5: kind - 1 in it (16 kinds); 6: 5 bits of kind (32 kinds)
// and 8 of root, the counts hash in arrival lines.
// 7: the verdict block after the control blocks. 8: ref_addr, ref_ok in the control blocks.
constexpr uint64_t kGroupLayoutVersion = 8;
constexpr size_t kMaxInlineBytes = 72 * kLineData;  // 4032 < kCodedCountLarge


uint64_t mix(uint64_t h, uint64_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); }

}  // namespace

// The waiter's deadline hook of a group (see "One call, one verdict" in shm_group.hpp).
class ShmGroup::Guard final : public DeadlineGuard {
 public:
  explicit Guard(ShmGroup &g) : g_(g) {}
  int on_deadline(const std::function<bool()> &ready) override { return g_.on_deadline(ready); }

 private:
  ShmGroup &g_;
};

ShmGroup::ShmGroup(const std::string &name, int rank, int size, const Deadline &deadline, ShmGroupOptions options)
    : rank_(rank),
      size_(size),
      options_(std::move(options)),
      waiter_(resolve_wait_options(options_.wait, size), [this] {
        check_verdict();  // a late rank hears at once that the call it waits in was given up
        if (options_.liveness) options_.liveness();
      }) {
  if (size < 1 || rank < 0 || rank >= size)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": rank ", rank, " out of range for ", size, " ranks");
  if (size > kMaxCodedRoot + 1)
    throw_error(PSTATE_ERR_UNSUPPORTED, options_.label, ": ", size, " ranks exceed the shared-memory protocol's ",
                kMaxCodedRoot + 1, " (the call codes hold roots up to ", kMaxCodedRoot, "); use UCX (PSTATE_SHM=0)");
  depth_ = std::clamp(options_.pipeline_depth, 2, 64);
  crowded_ = oversubscribed(size);
  options_.inline_depth = std::clamp(options_.inline_depth, 2, 256);
  // Inline payloads stay below kCodedCountLarge bytes, so their counts are exact in the code.
  options_.inline_bytes = std::min<size_t>(options_.inline_bytes, kMaxInlineBytes);
  inline_lines_ = std::max<size_t>(1, (options_.inline_bytes + kLineData - 1) / kLineData);
  area_bytes_ = round_up(std::max({options_.chunk_bytes, size_t{64} * static_cast<size_t>(size), kPageBytes}), kPageBytes);
  const auto ranks = static_cast<size_t>(size);
  const size_t control_bytes = round_up(kControlStride * (ranks + 1), kPageBytes);  // + the verdict block
  const size_t inline_total = round_up(ranks * options_.inline_depth * inline_lines_ * sizeof(Line), kPageBytes);
  const size_t area_total = area_bytes_ * static_cast<size_t>(depth_) * ranks;

  ShmSegment::Params params;
  params.name = name;
  params.label = options_.label;
  params.rank = rank;
  params.size = size;
  params.creator = 0;
  params.payload_bytes = control_bytes + inline_total + area_total;
  params.layout_tag = kGroupLayoutVersion;
  for (uint64_t v : {uint64_t{area_bytes_}, uint64_t(depth_), uint64_t{options_.small_bytes},
                     uint64_t{options_.inline_bytes}, uint64_t(options_.inline_depth), uint64_t(size),
                     uint64_t{options_.stream_bytes}, uint64_t{options_.min_step_bytes},
                     uint64_t{options_.inline_reduce_bytes}, uint64_t{options_.cma_bytes}})
    params.layout_tag = mix(params.layout_tag, v);
  params.attach_flags = options_.wait.asymmetric_fences && register_for_asymmetric_fences()
                            ? 0
                            : ShmSegment::kNoAsymmetricFence;
  segment_ = std::make_unique<ShmSegment>(params, deadline, waiter_);
  waiter_.set_light_notify((segment_->group_flags() & ShmSegment::kNoAsymmetricFence) == 0);
  lay_out(segment_->payload(), control_bytes, inline_total);
  guard_ = std::make_unique<Guard>(*this);
  waiter_.set_guard(guard_.get());
}

ShmGroup::~ShmGroup() = default;

std::string ShmGroup::describe() const {
  const WaitOptions &w = waiter_.options();
  return cat(options_.label, ": shared memory, ", size_, " ranks, ", segment_bytes() >> 10, " KiB segment; inline <= ",
             options_.inline_bytes, " B (all_reduce <= ", std::min(options_.inline_bytes, options_.inline_reduce_bytes),
             " B), whole-input all_reduce <= ", options_.small_bytes, " B, staged ", depth_,
             " x ", area_bytes_ >> 10, " KiB areas", crowded_ ? " (ranks > CPUs: no pipelining split)" : "",
             "; waits spin ", w.spin_ns / 1000, " us, yield ", w.yield_ns / 1000, " us, then futex (",
             waiter_.light_notify() ? "membarrier" : "fenced", " wake-ups)");
}

void ShmGroup::lay_out(uint8_t *payload, size_t control_bytes, size_t inline_total) {
  controls_ = payload;
  inline_ = controls_ + control_bytes;
  areas_ = inline_ + inline_total;
  known_done_.assign(static_cast<size_t>(size_), 0);
  verified_.assign(static_cast<size_t>(size_), 0);
  scratch_.assign(static_cast<size_t>(size_) * options_.inline_bytes, 0);
}

uint8_t *ShmGroup::area(int rank, uint64_t step) const {
  size_t index = static_cast<size_t>(rank) * static_cast<size_t>(depth_) + static_cast<size_t>(step % depth_);
  return areas_ + index * area_bytes_;
}

// Where the data of `step` (footprint bytes, the same on every rank) lies in rank's area: the
// offset turns each time the area comes round again, so a small step does not rewrite the lines
// the peers read a few steps ago (they would still hold them, and taking lines back from another
// core's cache is the slowest store there is) but lines last used long ago.
uint8_t *ShmGroup::staging(int rank, uint64_t step, size_t footprint) const {
  const size_t room = area_bytes_ - std::min(area_bytes_, round_up(footprint, 64));
  const uint64_t turn = step / static_cast<uint64_t>(depth_);
  const size_t offset = room == 0 ? 0 : (turn * round_up(footprint, 4096)) % (room + 1) / 64 * 64;
  return area(rank, step) + offset;
}

// ---- synchronization --------------------------------------------------------------------------

void ShmGroup::set_counter(Counter counter, uint64_t step) {
  Control &mine = control(rank_);
  (mine.*counter).store(step, std::memory_order_release);
  waiter_.notify(mine.signal);
}

void ShmGroup::wait_counter(int peer, Counter counter, uint64_t step, const char *what, const Deadline &deadline) {
  // A peer's first data of a call is read only after its arrival line was checked (waits for
  // `done` are about earlier steps: they come before this rank's own arrival is published).
  if (pending_ != 0 && counter != &Control::done && verified_[static_cast<size_t>(peer)] != call_step_)
    verify_peer(peer, deadline);
  Control &theirs = control(peer);
  waiter_.wait(
      theirs.signal, [&] { return (theirs.*counter).load(std::memory_order_acquire) >= step; }, deadline, [&] {
        return cat(options_.label, " rank ", rank_, ": ", current_op_, " (step ", step, "): waiting for rank ",
                   peer, " ", what);
      });
}

// Every peer has finished step `step` (it reads none of my memory of that step any more). The
// last value seen is cached: with deep slots most calls touch no peer cache line at all.
void ShmGroup::wait_done(uint64_t step, const Deadline &deadline) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || known_done_[p] >= step) continue;
    wait_counter(p, &Control::done, step, "to finish reading an earlier step", deadline);
    known_done_[p] = control(p).done.load(std::memory_order_acquire);
  }
}

// I read nothing of step `step` any more; the group's step advances. Peers rewrite the arrival
// line of a call only after my done passed its first step, so every peer is verified first.
void ShmGroup::finish_step(uint64_t step) {
  if (pending_ != 0) verify_peers(*call_deadline_);
  set_counter(&Control::done, step);
  step_ = step;
}

// ---- agreement --------------------------------------------------------------------------------

void ShmGroup::begin_call(const OpDescriptor &desc, bool checked_by_reads, const Deadline &deadline) {
  call_step_ = step_ + 1;
  in_call_ = true;
  call_desc_ = desc;
  call_desc_.seq = seq_;
  call_code_ = pack_call_code(desc);
  call_deadline_ = &deadline;
  pending_ = checked_by_reads ? 0 : size_ - 1;
#ifdef PSTATE_NO_AGREEMENT
  pending_ = 0;  // for measuring the agreement's cost only (CMake PSTATE_AGREEMENT=OFF)
#endif
}

int ShmGroup::global_rank(int group_rank) const {
  const auto i = static_cast<size_t>(group_rank);
  return i < options_.global_ranks.size() ? options_.global_ranks[i] : group_rank;
}

// The arrival line: line 0 of my inline slot of the call's first step, flagged with the call's
// word, its data the full count (the code holds small counts only), the sequence number and the
// descriptor's detail (the v-collectives' counts hash; 0 for the other kinds).
void ShmGroup::publish_arrival(const Deadline &deadline) {
  const uint64_t s = call_step_;
  const auto depth = static_cast<uint64_t>(options_.inline_depth);
  if (s > depth) wait_done(s - depth, deadline);
  Line *line = inline_line(rank_, s, 0);
  write_arrival_header(line->data);
  line->word.store(line_word(s), std::memory_order_release);
  waiter_.notify(control(rank_).signal);
}

void ShmGroup::write_arrival_header(uint8_t *dst) const {
  std::memcpy(dst, &call_desc_.count, sizeof call_desc_.count);
  std::memcpy(dst + 8, &call_desc_.seq, sizeof call_desc_.seq);
  std::memcpy(dst + 12, &call_desc_.detail, sizeof call_desc_.detail);
}

// Waits for peer's first line of this call and compares. A line flagged with the call's code
// and a large count, or with the code of a kind that carries a counts hash (those calls always
// publish arrival lines), is an arrival line: its data holds the count and the hash, compared in
// full.
void ShmGroup::verify_peer(int peer, const Deadline &deadline) {
  const uint64_t s = call_step_;
  Line *line = inline_line(peer, s, 0);
  uint64_t word = 0;
  waiter_.wait(
      control(peer).signal, [&] { return step_reached(word = line->word.load(std::memory_order_acquire), s); },
      deadline, [&] {
        return cat(options_.label, " rank ", rank_, ": ", current_op_, " (step ", s, "): waiting for rank ", peer,
                   " to arrive at this call");
      });
  // A refusal (OpKind::kRefused) at this call's step is no disagreement: a rank that refused
  // takes any call of its peers, and a peer's refusal ends this rank's call (see "Refusals").
  if (call_desc_.op == static_cast<uint32_t>(OpKind::kRefused) && static_cast<uint32_t>(word) == static_cast<uint32_t>(s)) {
    verified_[static_cast<size_t>(peer)] = s;
    --pending_;
    return;
  }
  check_line_word(peer, line, word, s);
  if (call_desc_.count >= kCodedCountLarge) {
    uint64_t count = 0;
    std::memcpy(&count, line->data, sizeof count);
    if (count != call_desc_.count) mismatch(peer, line, word);
  }
  if (carries_counts_hash(call_desc_.op)) {
    uint32_t detail = 0;
    std::memcpy(&detail, line->data + 12, sizeof detail);
    if (detail != call_desc_.detail) mismatch(peer, line, word);
  }
  verified_[static_cast<size_t>(peer)] = s;
  --pending_;
}

void ShmGroup::verify_peers(const Deadline &deadline) {
  for (int n = 1; n < size_ && pending_ != 0; ++n) {
    const int p = (rank_ + n) % size_;
    if (verified_[static_cast<size_t>(p)] != call_step_) verify_peer(p, deadline);
  }
}

void ShmGroup::disagreement(int peer, const Line *line, uint64_t word, uint64_t step) {
  const OpDescriptor theirs = unpack_call_code(static_cast<uint32_t>(word >> 32));
  if (theirs.op == static_cast<uint32_t>(OpKind::kRefused) && static_cast<uint32_t>(word) == static_cast<uint32_t>(step) &&
      step == call_step_)
    refused(peer, line);
  mismatch(peer, line, word);
}

void ShmGroup::refused(int peer, const Line *line) {
  uint64_t count = 0;  // the arrival line's data: the count or size the peer passed
  std::memcpy(&count, line->data, sizeof count);
  refusal_ = true;  // not a failure of the group: run_guarded ends the call on every rank alike
  throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, " #", call_desc_.seq, " ", current_op_, ": rank ",
              global_rank(peer), " (group rank ", peer, ") refused its part of this call (an argument only it could "
              "check: a NULL, too small or overlapping buffer, a size past 2^47 bytes or of none, a pointer that is "
              "no group memory, ...; its own error names it; the count or size it passed: ", count, "), so every "
              "rank of the call returns this error (buffers it would have written may hold part of the data); the "
              "group is still in step and usable: fix that rank's arguments");
}

// The end of a refused call, on the rank that refused it (after its arrival step) and on every
// rank that found the refusal (wherever in its protocol that was): every rank leaves it at the
// same step, call_step_ + kRefusedCallSteps, and says so in all three counters. A rank may have
// published lines or staged steps of the call past its first step before it found the refusal
// (at most a step or two: every protocol reads or verifies its peers in its first step); their
// flags and counters are all below the new step, so no later call takes them for its own, and a
// peer still waiting on one of them in this call is released to find the refusal itself.
void ShmGroup::leave_refused_call() {
  const uint64_t next = call_step_ + refused_call_steps();
  Control &mine = control(rank_);
  mine.in.store(next, std::memory_order_release);
  mine.out.store(next, std::memory_order_release);
  set_counter(&Control::done, next);
  step_ = next;
}

uint64_t ShmGroup::refused_call_steps() const {
  // Past anything a rank can have published in the call: its inline slots and staging areas
  // turn every inline_depth / depth_ steps (the same values on every rank: they shape the segment).
  return 2 * (static_cast<uint64_t>(depth_) + static_cast<uint64_t>(options_.inline_depth)) + 4;
}

void ShmGroup::mismatch(int peer, const Line *line, uint64_t word) const {
  OpDescriptor theirs = unpack_call_code(static_cast<uint32_t>(word >> 32));
  if (theirs.count == kCodedCountLarge) std::memcpy(&theirs.count, line->data, sizeof theirs.count);
  if (carries_counts_hash(theirs.op)) std::memcpy(&theirs.detail, line->data + 12, sizeof theirs.detail);
  const auto their_step = static_cast<uint32_t>(word);
  const bool other_step = their_step != static_cast<uint32_t>(call_step_);
  throw_error(PSTATE_ERR_MISMATCH, options_.label, " #", call_desc_.seq, ": rank ", global_rank(rank_),
              " (group rank ", rank_, ") called ", describe_op(call_desc_), ", rank ", global_rank(peer),
              " (group rank ", peer, ") called ", describe_op(theirs),
              other_step ? cat(" at another step (", their_step, " != ", static_cast<uint32_t>(call_step_), ")") : "",
              ": every rank of a group must call the same collectives in the same order, with the same counts, "
              "dtypes, reduce ops and roots (shared memory; the call fails on every rank). This context is now "
              "failed: every later call on it returns ABORTED; free it with pstate_abort and start the job "
              "again (pstate_init) once every rank makes the same calls");
}

void ShmGroup::arrive(const OpDescriptor &desc, const Deadline &deadline) {
  if (size_ == 1) return;
  run_guarded(op_kind_name(static_cast<OpKind>(desc.op)), [&] { arrive_now(desc, deadline); });
}

void ShmGroup::arrive_now(const OpDescriptor &desc, const Deadline &deadline) {
  begin_call(desc, false, deadline);
  publish_arrival(deadline);
  verify_peers(deadline);  // a peer's refusal throws here (refused)
  finish_step(call_step_);
  if (call_desc_.op == static_cast<uint32_t>(OpKind::kRefused)) leave_refused_call();
}

template <typename Body>
void ShmGroup::run_guarded(const char *op, Body &&body) {
  if (broken_)
    throw_error(PSTATE_ERR_ABORTED, options_.label, " rank ", rank_, ": ", op,
                " refused: an earlier shared-memory collective failed, peers are at unknown steps "
                "(abort or finalize the context)");
  current_op_ = op;
  in_call_ = false;
  refusal_ = false;
  try {
    body();
    // After the call's last flag store and its fence (finish_step's notify): one load of a line
    // nobody writes while every call succeeds.
    if (in_call_ && verdict().watch.load(std::memory_order_relaxed) >= call_step_) commit_call();
  } catch (const Error &e) {
    if (refusal_) {  // a peer refused the call: every rank leaves it at the same step
      leave_refused_call();
      in_call_ = false;
      throw;
    }
    broken_ = true;
    if (in_call_) give_up(e.status());  // later arrivals hear that this call failed
    in_call_ = false;
    throw;
  } catch (...) {
    broken_ = true;
    if (in_call_) give_up(PSTATE_ERR_INTERNAL);
    in_call_ = false;
    throw;
  }
  in_call_ = false;
}

// ---- one call, one verdict (see shm_group.hpp) -------------------------------------------------

ShmGroup::Verdict &ShmGroup::verdict() const {
  return *reinterpret_cast<Verdict *>(controls_ + kControlStride * static_cast<size_t>(size_));
}

// Raises `watch` to this call, then fences: from here on every rank that ends the call looks at
// the verdict word (and a rank that ended it before has its flags visible to this one).
void ShmGroup::raise_watch() {
  Verdict &v = verdict();
  uint64_t seen = v.watch.load(std::memory_order_relaxed);
  while (seen < call_step_ && !v.watch.compare_exchange_weak(seen, call_step_, std::memory_order_seq_cst)) {
  }
  heavy_fence(waiter_.light_notify());
}

// Any failure of a call this rank is in (an abort, an interruption, a peer's notice, a lost peer,
// a mismatch): the same order as at a deadline, so a rank that arrives later and finds everything
// it needs in the segment still ends with this verdict, not OK.
void ShmGroup::give_up(pstate_status_t status) {
  try {
    raise_watch();
  } catch (...) {  // the verdict below is what counts
  }
  mark_failed(status);
}

int ShmGroup::on_deadline(const std::function<bool()> &ready) {
  if (!in_call_) return DeadlineGuard::kGiveUp;  // set-up waits: nothing to decide
  raise_watch();
  if (ready()) return DeadlineGuard::kReady;
  const uint64_t w = mark_failed(PSTATE_ERR_TIMEOUT);
  if (verdict_step(w) == call_step_ && verdict_state(w) == kVerdictCommitted) return DeadlineGuard::kKeepWaiting;
  return DeadlineGuard::kGiveUp;
}

uint64_t ShmGroup::mark_failed(pstate_status_t status) {
  Verdict &v = verdict();
  uint64_t w = v.word.load(std::memory_order_acquire);
  if (verdict_step(w) >= call_step_) return w;  // decided (by this rank or another), or a later call
  Control &mine = control(rank_);
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  mine.gave_up_unix_ms.store(static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000, std::memory_order_relaxed);
  mine.gave_up_status.store(static_cast<int32_t>(status), std::memory_order_relaxed);
  const uint64_t failed = verdict_word(call_step_, kVerdictFailed, rank_);
  while (verdict_step(w) < call_step_)
    if (v.word.compare_exchange_weak(w, failed, std::memory_order_acq_rel, std::memory_order_acquire)) return failed;
  return w;
}

void ShmGroup::commit_call() {
  Verdict &v = verdict();
  uint64_t w = v.word.load(std::memory_order_acquire);
  const uint64_t committed = verdict_word(call_step_, kVerdictCommitted, rank_);
  while (verdict_step(w) < call_step_)
    if (v.word.compare_exchange_weak(w, committed, std::memory_order_acq_rel, std::memory_order_acquire)) return;
  if (verdict_step(w) == call_step_ && verdict_state(w) == kVerdictFailed) throw_failed_call(w, true);
}

void ShmGroup::check_verdict() const {
  if (!in_call_ || controls_ == nullptr) return;
  const uint64_t w = verdict().word.load(std::memory_order_acquire);
  if (verdict_step(w) == call_step_ && verdict_state(w) == kVerdictFailed && verdict_rank(w) != rank_)
    throw_failed_call(w, false);
}

void ShmGroup::throw_failed_call(uint64_t w, bool completed) const {
  const int giver = verdict_rank(w);
  const Control &theirs = control(giver);
  const int64_t at = theirs.gave_up_unix_ms.load(std::memory_order_relaxed);
  const auto status = static_cast<pstate_status_t>(theirs.gave_up_status.load(std::memory_order_relaxed));
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const int64_t now = static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
  const time_t secs = static_cast<time_t>(at / 1000);
  tm t{};
  gmtime_r(&secs, &t);
  char when[48];
  std::snprintf(when, sizeof when, "%02d:%02d:%02d.%03d UTC", t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>(at % 1000));
  throw_error(status == PSTATE_ERR_INTERRUPTED || status == PSTATE_OK ? PSTATE_ERR_ABORTED : status, options_.label,
              " #", call_desc_.seq, " ", current_op_, ": rank ", global_rank(giver), " (group rank ", giver,
              ") gave up on this call at ", when, ", ", static_cast<double>(now - at) / 1000.0, " s ago, with ",
              pstate_status_string(status), ", so the call failed for every rank of the group (one call, one verdict)",
              completed ? cat(": rank ", global_rank(rank_), " arrived late and found what it needed, but does not "
                              "return OK from a call its peers failed")
                        : cat(" while rank ", global_rank(rank_), " waited in it"),
              "; the context is failed: call pstate_abort");
}

// ---- argument checks --------------------------------------------------------------------------

size_t ShmGroup::checked_dtype_size(const char *op, pstate_dtype_t dtype, size_t count, size_t multiple) const {
  size_t esize = dtype_size(dtype);
  if (esize == 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": ", op, ": invalid dtype ", static_cast<int>(dtype));
  if (count > SIZE_MAX / esize / multiple)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": ", op, ": count ", count, " overflows size_t");
  return esize;
}

void ShmGroup::check_reduce(const char *op, pstate_dtype_t dtype, pstate_reduce_op_t op_kind) const {
  if (op_kind < PSTATE_SUM || op_kind > PSTATE_AVG)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": ", op, ": invalid reduce op ",
                static_cast<int>(op_kind));
  if (!is_reducible(dtype))
    throw_error(PSTATE_ERR_UNSUPPORTED, options_.label, ": ", op, ": dtype ", static_cast<int>(dtype),
                " cannot be reduced on CPU (fp8 is move-only; reduce in a wider type)");
}

void ShmGroup::check_buffers(const char *op, const void *send, const void *recv, size_t count) const {
  if (count != 0 && (send == nullptr || recv == nullptr))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": ", op, ": ", send == nullptr ? "send" : "recv",
                " is NULL with count ", count);
}

void ShmGroup::check_root(const char *op, int root) const {
  if (root < 0 || root >= size_)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": ", op, ": root ", root, " out of range for ", size_,
                " ranks");
}

// ---- entry points: checks, trivial cases, protocol by size -------------------------------------

void ShmGroup::all_reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                          const Deadline &deadline, OpKind kind) {
  const size_t esize = checked_dtype_size("all_reduce", dtype, count, 1);
  check_reduce("all_reduce", dtype, op);
  check_buffers("all_reduce", send, recv, count);
  auto *in = static_cast<const uint8_t *>(send);
  auto *out = static_cast<uint8_t *>(recv);
  const size_t bytes = count * esize;
  const OpDescriptor desc = make_op(kind, count, dtype, op);
  run_guarded("all_reduce", [&] {
    if (size_ == 1) {
      if (in != out && bytes != 0) std::memmove(out, in, bytes);
    } else if (count == 0) {
      arrive_now(desc, deadline);
    } else if (bytes <= std::min(options_.inline_bytes, options_.inline_reduce_bytes)) {
      begin_call(desc, true, deadline);
      inline_all_reduce(in, out, count, esize, dtype, op, deadline);
    } else {
      begin_call(desc, false, deadline);
      publish_arrival(deadline);
      if (bytes <= std::min(options_.small_bytes, area_bytes_))
        staged_all_reduce_whole(in, out, count, esize, dtype, op, deadline);
      else
        staged_all_reduce(in, out, count, esize, dtype, op, deadline);
    }
  });
}

void ShmGroup::all_gather(const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
                          const Deadline &deadline, OpKind kind) {
  const size_t esize = checked_dtype_size("all_gather", dtype, send_count, static_cast<size_t>(size_));
  check_buffers("all_gather", send, recv, send_count);
  auto *in = static_cast<const uint8_t *>(send);
  auto *out = static_cast<uint8_t *>(recv);
  const size_t bytes = send_count * esize;
  const OpDescriptor desc = make_op(kind, send_count, dtype);
  run_guarded("all_gather", [&] {
    if (size_ == 1) {
      if (in != out && bytes != 0) std::memmove(out, in, bytes);
    } else if (send_count == 0) {
      arrive_now(desc, deadline);
    } else if (bytes <= options_.inline_bytes) {
      begin_call(desc, true, deadline);
      inline_all_gather(in, out, bytes, deadline);
    } else {
      begin_call(desc, false, deadline);
      publish_arrival(deadline);
      staged_all_gather(in, out, send_count, esize, deadline);
    }
  });
}

namespace {

// The first byte of each rank's part when parts of counts[i] elements are packed in rank order;
// the last entry is the total.
std::vector<size_t> part_offsets(const size_t *counts, int n, size_t esize) {
  std::vector<size_t> off(static_cast<size_t>(n) + 1, 0);
  for (int r = 0; r < n; ++r) off[r + 1] = off[r] + counts[r] * esize;
  return off;
}

}  // namespace

// The v-collectives carry their own agreement: inline, each rank's payload starts with the
// arrival line's header (kInlineVHeader bytes: full count, sequence number, counts hash), which
// every reader checks (verify_peer) before it reads the part behind it — one hand-off for
// agreement and data; staged, an arrival line first, as for all_gather.
void ShmGroup::all_gatherv(const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                           const OpDescriptor &desc, const Deadline &deadline) {
  const size_t esize = dtype_size(dtype);
  size_t largest = 0;
  for (int r = 0; r < size_; ++r) largest = std::max(largest, counts[r]);
  const std::vector<size_t> off = part_offsets(counts, size_, esize);
  auto *in = static_cast<const uint8_t *>(send);
  auto *out = static_cast<uint8_t *>(recv);
  run_guarded("all_gatherv", [&] {
    if (size_ == 1) {
      if (counts[0] != 0 && in != out) std::memmove(out, in, counts[0] * esize);
    } else if (largest == 0) {
      arrive_now(desc, deadline);
    } else if (kInlineVHeader + largest * esize <= options_.inline_bytes) {
      begin_call(desc, false, deadline);
      inline_all_gatherv(in, out, counts, off.data(), esize, deadline);
    } else {
      begin_call(desc, false, deadline);
      publish_arrival(deadline);
      if (!by_reference(largest * esize) || !cma_all_gatherv(in, out, counts, off.data(), esize, deadline))
        staged_all_gatherv(in, out, counts, off.data(), esize, deadline);
    }
  });
}

void ShmGroup::reduce_scatterv(const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                               pstate_reduce_op_t op, const OpDescriptor &desc, const Deadline &deadline) {
  const size_t esize = dtype_size(dtype);
  check_reduce("reduce_scatterv", dtype, op);
  size_t largest = 0;
  for (int r = 0; r < size_; ++r) largest = std::max(largest, counts[r]);
  const std::vector<size_t> off = part_offsets(counts, size_, esize);
  auto *in = static_cast<const uint8_t *>(send);
  auto *out = static_cast<uint8_t *>(recv);
  run_guarded("reduce_scatterv", [&] {
    if (size_ == 1) {
      if (counts[0] != 0 && in != out) std::memmove(out, in, counts[0] * esize);
    } else if (largest == 0) {
      arrive_now(desc, deadline);
    } else if (kInlineVHeader + off[static_cast<size_t>(size_)] <= options_.inline_bytes) {
      begin_call(desc, false, deadline);
      inline_reduce_scatterv(in, out, counts, off.data(), esize, dtype, op, deadline);
    } else {
      begin_call(desc, false, deadline);
      publish_arrival(deadline);
      staged_reduce_scatterv(in, out, counts, off.data(), esize, dtype, op, deadline);
    }
  });
}

void ShmGroup::reduce_scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                              pstate_reduce_op_t op, const Deadline &deadline) {
  const size_t esize = checked_dtype_size("reduce_scatter", dtype, recv_count, static_cast<size_t>(size_));
  check_reduce("reduce_scatter", dtype, op);
  check_buffers("reduce_scatter", send, recv, recv_count);
  auto *in = static_cast<const uint8_t *>(send);
  auto *out = static_cast<uint8_t *>(recv);
  const OpDescriptor desc = make_op(OpKind::kReduceScatter, recv_count, dtype, op);
  run_guarded("reduce_scatter", [&] {
    if (size_ == 1) {
      if (in != out && recv_count != 0) std::memmove(out, in, recv_count * esize);
    } else if (recv_count == 0) {
      arrive_now(desc, deadline);
    } else if (recv_count * esize * static_cast<size_t>(size_) <= options_.inline_bytes) {
      begin_call(desc, true, deadline);
      inline_reduce_scatter(in, out, recv_count, esize, dtype, op, deadline);
    } else {
      begin_call(desc, false, deadline);
      publish_arrival(deadline);
      staged_reduce_scatter(in, out, recv_count, esize, dtype, op, deadline);
    }
  });
}

void ShmGroup::broadcast(void *buf, size_t count, pstate_dtype_t dtype, int root, const Deadline &deadline) {
  const size_t esize = checked_dtype_size("broadcast", dtype, count, 1);
  check_buffers("broadcast", buf, buf, count);
  if (root < 0 || root >= size_)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, options_.label, ": broadcast: root ", root, " out of range for ",
                size_, " ranks");
  if (size_ == 1) return;
  auto *data = static_cast<uint8_t *>(buf);
  const OpDescriptor desc = make_op(OpKind::kBroadcast, count, dtype, -1, root);
  run_guarded("broadcast", [&] {
    if (count == 0) {
      arrive_now(desc, deadline);
    } else if (count * esize <= options_.inline_bytes) {
      begin_call(desc, false, deadline);
      inline_broadcast(data, count * esize, root, deadline);
    } else {
      begin_call(desc, false, deadline);
      publish_arrival(deadline);
      staged_broadcast(data, count, esize, root, deadline);
    }
  });
}

void ShmGroup::reduce(const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                      int root, const Deadline &deadline) {
  const size_t esize = checked_dtype_size("reduce", dtype, count, 1);
  check_reduce("reduce", dtype, op);
  check_root("reduce", root);
  const bool is_root = rank_ == root;
  check_buffers("reduce", send, is_root ? recv : send, count);
  auto *in = static_cast<const uint8_t *>(send);
  uint8_t *out = is_root ? static_cast<uint8_t *>(recv) : nullptr;  // nullptr: contribute only
  const size_t bytes = count * esize;
  const OpDescriptor desc = make_op(OpKind::kReduce, count, dtype, op, root);
  run_guarded("reduce", [&] {
    if (size_ == 1) {
      if (in != out && bytes != 0) std::memmove(out, in, bytes);
    } else if (count == 0) {
      arrive_now(desc, deadline);
    } else if (bytes <= std::min(options_.inline_bytes, options_.inline_reduce_bytes)) {
      begin_call(desc, is_root, deadline);  // the root reads every peer's lines; the others none
      inline_all_reduce(in, out, count, esize, dtype, op, deadline);
    } else {
      begin_call(desc, false, deadline);
      publish_arrival(deadline);
      if (bytes <= std::min(options_.small_bytes, area_bytes_))
        staged_all_reduce_whole(in, out, count, esize, dtype, op, deadline);
      else
        staged_all_reduce(in, out, count, esize, dtype, op, deadline);
    }
  });
}

void ShmGroup::scatter(const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root,
                       const Deadline &deadline) {
  const size_t esize = checked_dtype_size("scatter", dtype, recv_count, static_cast<size_t>(size_));
  check_root("scatter", root);
  const bool is_root = rank_ == root;
  check_buffers("scatter", is_root ? send : recv, recv, recv_count);
  auto *in = is_root ? static_cast<const uint8_t *>(send) : nullptr;
  auto *out = static_cast<uint8_t *>(recv);
  const size_t bytes = recv_count * esize;
  const OpDescriptor desc = make_op(OpKind::kScatter, recv_count, dtype, -1, root);
  run_guarded("scatter", [&] {
    if (size_ == 1) {
      if (in != out && bytes != 0) std::memmove(out, in, bytes);
    } else if (recv_count == 0) {
      arrive_now(desc, deadline);
    } else if (bytes * static_cast<size_t>(size_) <= options_.inline_bytes) {
      begin_call(desc, false, deadline);
      inline_scatter(in, out, bytes, root, deadline);
    } else {
      begin_call(desc, false, deadline);
      publish_arrival(deadline);
      staged_scatter(in, out, recv_count, esize, root, deadline);
    }
  });
}

void ShmGroup::barrier(const Deadline &deadline, OpKind kind) {
  if (size_ == 1) return;
  run_guarded(op_kind_name(kind), [&] {
    begin_call(make_op(kind, 0), true, deadline);
    inline_barrier(deadline);
  });
}

}  // namespace pstate::shm
