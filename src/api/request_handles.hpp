// request_handles.hpp — what a pstate_request_t handle is: a number never reused while the process
// lives, looked up before anything is touched, so a freed, stale or made-up handle is refused
// (INVALID_ARGUMENT) and can never reach another request (issue 27, item 7).
//
// A handle used to be its request's heap address, checked by a magic word inside: a second
// pstate_wait read freed memory, and since the next request often got the same address,
// wait(r1) completed r2. Now each request lives in a process-wide registry (a hash map from
// handle to request, under one mutex) and its handle is a token:
//  - an address inside a reserved PROT_NONE, MAP_NORESERVE region (2^40 bytes; smaller where mmap
//    refuses so much: a finite RLIMIT_AS, sanitizers, valgrind), so it is never the address of a
//    real object (nothing can be mapped there) and Go's garbage collector never takes it for a
//    pointer into its heap (the Go binding holds handles as integers); a pointer outside the
//    region is refused without taking the lock;
//  - handed out in order, one byte apart, so it repeats only after 2^40 requests of the process
//    (a stale handle kept that long could name a later request; a live one is never handed out
//    twice: the count skips tokens still in use when it wraps).
//
// Why one registry per process, against "no global mutable state" (DESIGN.md, STYLE.md): that rule
// keeps N contexts of one process independent. A request outlives its context (it is completed
// after pstate_finalize / pstate_abort freed it), and pstate_wait gets nothing but the handle, so
// the registry cannot hang off a pstate_t. It keeps the contexts independent all the same: it holds
// no context state, an entry is reached only by its own token, and its lock is held for one hash
// map insert, lookup or erase (never while a transfer is driven; tens of nanoseconds), so contexts
// on different threads never wait on each other for longer than that.
//
// Claims: a call that uses a request (isend/irecv while posting it, wait/test while completing it)
// claims it; a second call on the same handle meanwhile (another thread: a caller's race) gets
// INVALID_STATE instead of two threads driving or freeing one request. Only the claimer frees an
// entry, so the request a claim holds stays put; unclaiming is one atomic store.
//
// Fork: the atfork handlers hold the mutex across fork(), so a child never inherits it locked (the
// child's copies of the parent's requests are unusable like the parent's contexts: a claimed one
// answers INVALID_STATE). The registry is never destroyed: a request may be completed by any
// thread at any time, also while the process exits (its never-completed requests stay allocated
// and reachable: a few dozen bytes each, as before).
#pragma once

#include "group/request.hpp"

#include <pstate/pstate.h>

#include <atomic>
#include <cstdint>

namespace pstate::api {

struct RequestEntry {
  RequestState state;
  std::atomic<bool> claimed{true};  // born claimed by the isend/irecv that posts it
};

// A request claimed by the calling thread: its state is this call's to drive until the claim ends
// with keep() (the request stays live: the destructor does it) or free() (it is gone, its handle
// refused from then on).
class RequestClaim {
 public:
  RequestClaim() = default;
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
  friend class RequestHandles;
  RequestClaim(pstate_request_t *handle, RequestEntry *entry) : handle_(handle), entry_(entry) {}
  pstate_request_t *handle_ = nullptr;
  RequestEntry *entry_ = nullptr;
};

class RequestHandles {
 public:
  // A new pending request with a fresh handle, claimed by the caller. NO_MEMORY when the handle
  // region could not be reserved or the map cannot grow.
  static RequestClaim make();
  // The live request of handle h, claimed: INVALID_ARGUMENT (NULL, or not a live request: freed by
  // an earlier wait/test, never made, garbage), INVALID_STATE (another thread holds it now).
  static RequestClaim claim(const pstate_request_t *h);
};

}  // namespace pstate::api
