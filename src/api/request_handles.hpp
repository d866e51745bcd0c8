// request_handles.hpp — what a pstate_request_t handle is: a number never reused while the process
// lives, looked up before anything is touched, so a freed, stale or made-up handle is refused
// (INVALID_ARGUMENT) and can never reach another request: a bad handle is an error, never a crash.
//
// A handle used to be its request's heap address, checked by a magic word inside: a second
// pstate_wait read freed memory, and since the next request often got the same address,
// wait(r1) completed r2. Now each request lives in a process-wide registry and its handle is a
// token:
//  - an address inside a reserved PROT_NONE, MAP_NORESERVE region (2^40 bytes; smaller where mmap
//    refuses so much: a finite RLIMIT_AS, sanitizers, valgrind), so it is never the address of a
//    real object (nothing can be mapped there) and Go's garbage collector never takes it for a
//    pointer into its heap (the Go binding holds handles as integers); a pointer outside the
//    region is refused without taking the lock;
//  - handed out in order, one byte apart, so it repeats only after 2^40 requests of the process
//    (a stale handle kept that long could name a later request; a live one is never handed out
//    twice: the count skips tokens still in use when it wraps).
//
// The registry is a table of slots under one mutex, a power of two of them: token t lives in slot
// t % size, which holds its entry (the request's state and its phase). Since tokens come in
// order, the next token's slot is free unless a request made one table-length ago is still
// pending; then the token is skipped, and after a few skips in a row the table doubles (no two
// live tokens share a slot in the doubled table either). Entries are never freed, only recycled
// by the next token landing in their slot, so a state never moves while its request lives (the
// group holds a pointer to it) and a steady flow of requests allocates nothing.
//
// Why one registry per process, against "no global mutable state" (DESIGN.md, STYLE.md): that rule
// keeps N contexts of one process independent. A request outlives its context (it is completed
// after pstate_finalize / pstate_abort freed it), and pstate_wait gets nothing but the handle, so
// the registry cannot hang off a pstate_t. It keeps the contexts independent all the same: it holds
// no context state, an entry is reached only by its own token, and its lock is held for a slot
// lookup or assignment (never while a transfer is driven; nanoseconds, or a copy of the table
// when it doubles), so contexts on different threads never wait on each other for longer.
//
// Claims: a call that uses a request (isend/irecv while posting it, wait/test while completing it)
// claims it; a second call on the same handle meanwhile (another thread: a caller's race) gets
// INVALID_STATE instead of two threads driving or freeing one request. The claimer alone changes
// the entry's phase back (keep: live again; free: finished), with one atomic store and no lock.
// Cost: one uncontended lock per isend/irecv and one per wait/test, no allocation: ~6 ns per
// request in a loop of the registry alone; a 2-rank shared-memory loop of irecv + isend + wait +
// wait (ranks pinned, 2-core VM) took 0.535 us per iteration before and 0.545 us after, and the
// median of each call grew by 0-20 ns.
//
// Fork: the atfork handlers hold the mutex across fork(), so a child never inherits it locked (the
// child's copies of the parent's requests are unusable like the parent's contexts: a claimed one
// answers INVALID_STATE). The registry is never destroyed: a request may be completed by any
// thread at any time, also while the process exits (its never-completed requests stay allocated
// and reachable: about a hundred bytes each, as before).
#pragma once

#include "group/request.hpp"

#include <pstate/pstate.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace pstate::api {

// One slot's request. phase: kFree (no request: finished, or the slot never used), kLive (made,
// not in any call), kClaimed (a call holds it). Changed from kLive or kFree under the registry's
// lock; from kClaimed only by its claimer.
struct RequestEntry {
  enum Phase : uint32_t { kFree, kLive, kClaimed };
  std::atomic<uint32_t> phase{kFree};
  RequestState state;
};

// A request claimed by the calling thread: its state is this call's to drive until the claim ends
// with keep() (the request stays live: the destructor does it) or free() (it is gone, its handle
// refused from then on). Neither takes the registry's lock.
class RequestClaim {
 public:
  RequestClaim() = default;
  RequestClaim(pstate_request_t *handle, RequestEntry *entry) : handle_(handle), entry_(entry) {}
  RequestClaim(RequestClaim &&other) noexcept;
  RequestClaim &operator=(RequestClaim &&other) noexcept;
  RequestClaim(const RequestClaim &) = delete;
  RequestClaim &operator=(const RequestClaim &) = delete;
  ~RequestClaim() { keep(); }

  RequestState &state() const { return entry_->state; }
  pstate_request_t *handle() const { return handle_; }
  void keep() noexcept;
  void free() noexcept;

 private:
  pstate_request_t *handle_ = nullptr;
  RequestEntry *entry_ = nullptr;
};

class RequestRegistry {
 public:
  // The process's registry, made on first use and never destroyed (see the top of this file);
  // fork() holds its lock.
  static RequestRegistry &process();

  // A registry whose tokens repeat after at most 2^max_region_bits requests (the process's: 40;
  // tests use small ones to see the count wrap).
  explicit RequestRegistry(unsigned max_region_bits);
  ~RequestRegistry();  // gives the region back (the process's registry is never destroyed)
  RequestRegistry(const RequestRegistry &) = delete;
  RequestRegistry &operator=(const RequestRegistry &) = delete;

  // A new pending request with a fresh handle, claimed by the caller. NO_MEMORY when the handle
  // region could not be reserved or every handle is in use.
  RequestClaim make();
  // The live request of handle h, claimed: INVALID_ARGUMENT (NULL, or not a live request: freed by
  // an earlier wait/test, never made, garbage), INVALID_STATE (another call holds it now).
  RequestClaim claim(const pstate_request_t *h);

  // The number of tokens (2^k) and of slots now: for tests.
  uint64_t token_count() const { return region_.mask + 1; }
  size_t slot_count();

 private:
  struct Region {
    uintptr_t base = 0;  // 0: none could be reserved (every handle is then refused; make fails)
    uintptr_t mask = 0;  // size - 1 (a power of two)
    int error = 0;       // mmap's errno when none could be reserved
  };
  // Token t lives in slots_[t & (size - 1)].
  struct Slot {
    uintptr_t offset = 0;                 // the token's offset in the region (meaningful with an entry)
    std::unique_ptr<RequestEntry> entry;  // made on the slot's first use, then recycled
  };
  static Region reserve_region(unsigned max_bits);
  void grow();
  static void fork_prepare();
  static void fork_release();

  const Region region_;  // never changes after construction: read without the lock
  std::mutex mu_;        // guards next_ and slots_
  uint64_t next_ = 0;    // the next token's offset in the region (taken modulo its size)
  std::vector<Slot> slots_;
};

}  // namespace pstate::api
