// request_handles.cpp — the process-wide registry of requests behind RequestHandles: the reserved
// token region, the map from token to request under one mutex, claims, and the fork handlers.
// Why it is one per process, and what a token guarantees: request_handles.hpp.
#include "api/request_handles.hpp"

#include "common/error.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace pstate::api {
namespace {

// Sizes tried for the token region, largest first: 2^40 tokens (a fresh one per request for the
// life of any realistic process), down to 2^16 where mmap refuses more (sanitizers and valgrind
// manage their own address space; a finite RLIMIT_AS counts even PROT_NONE reservations).
constexpr unsigned kRegionBits[] = {40, 36, 32, 28, 24, 20, 16};

struct Region {
  uintptr_t base = 0;  // 0: none could be reserved (every handle is then refused; make fails)
  uintptr_t mask = 0;  // size - 1 (a power of two)
  int error = 0;       // mmap's errno when none could be reserved
};

Region reserve_region() {
  rlimit as{};
  const bool limited = ::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY;
  int error = ENOMEM;
  for (unsigned bits : kRegionBits) {
    const size_t size = size_t{1} << bits;
    if (limited && size > as.rlim_cur / 16) continue;  // take a small share of a limited address space
    void *p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) return {reinterpret_cast<uintptr_t>(p), size - 1, 0};
    error = errno;
  }
  return {0, 0, error};
}

class Registry {
 public:
  Registry() : region_(reserve_region()) { entries_.reserve(64); }

  // A registered request (born claimed) with its handle; the RequestClaim is made by RequestHandles.
  struct Made {
    pstate_request_t *handle;
    RequestEntry *entry;
  };
  Made make();
  Made claim(const pstate_request_t *h);
  void free(pstate_request_t *h) noexcept;

  // fork(): held across it, so the child's copy is unlocked (pthread_atfork, registered once).
  void lock_for_fork() { mu_.lock(); }
  void unlock_after_fork() { mu_.unlock(); }

 private:
  bool in_region(uintptr_t token) const { return token - region_.base <= region_.mask && region_.base != 0; }

  const Region region_;  // never changes after construction: read without the lock
  std::mutex mu_;        // guards next_ and entries_
  uint64_t next_ = 0;    // the next token's offset in the region (taken modulo its size)
  std::unordered_map<uintptr_t, RequestEntry> entries_;  // live requests by token (nodes never move)
};

Registry *g_registry = nullptr;  // set once, before the fork handlers that use it are registered

void fork_prepare() { g_registry->lock_for_fork(); }
void fork_release() { g_registry->unlock_after_fork(); }

// Never destroyed (request_handles.hpp: a request may be completed while the process exits).
Registry &registry() {
  static Registry *r = [] {
    g_registry = new Registry;
    pthread_atfork(fork_prepare, fork_release, fork_release);
    return g_registry;
  }();
  return *r;
}

Registry::Made Registry::make() {
  if (region_.base == 0)
    throw_error(PSTATE_ERR_NO_MEMORY, "no address space for request handles: mmap of a PROT_NONE region (64 KiB "
                "to 1 TiB, none of it memory) failed: ", std::strerror(region_.error),
                "; is the address-space limit (ulimit -v) very low?");
  std::unique_lock<std::mutex> lock(mu_);
  if (entries_.size() > region_.mask) {
    lock.unlock();
    throw_error(PSTATE_ERR_NO_MEMORY, "every one of the ", region_.mask + 1, " request handles is in use: "
                "complete requests (pstate_wait / pstate_test) before posting more");
  }
  for (;;) {  // a token still in use (only after the count wrapped around the region) is skipped
    const uintptr_t token = region_.base + (next_++ & region_.mask);
    auto [it, fresh] = entries_.try_emplace(token);
    if (fresh) return {reinterpret_cast<pstate_request_t *>(token), &it->second};
  }
}

Registry::Made Registry::claim(const pstate_request_t *h) {
  const auto token = reinterpret_cast<uintptr_t>(h);
  RequestEntry *entry = nullptr;
  bool busy = false;
  if (in_region(token)) {  // anything else is refused without the lock
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = entries_.find(token); it != entries_.end()) {
      entry = &it->second;
      busy = entry->claimed.exchange(true, std::memory_order_acquire);
    }
  }
  if (entry == nullptr)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "req is not a live request: already completed and freed by an earlier "
                "pstate_wait / pstate_test, or never made by pstate_isend / pstate_irecv (a request is completed "
                "once; nothing was touched)");
  if (busy)
    throw_error(PSTATE_ERR_INVALID_STATE, "req is in use by another thread's call right now (its pstate_wait / "
                "pstate_test, or the pstate_isend / pstate_irecv still posting it): complete each request from "
                "one thread; nothing was freed");
  return {const_cast<pstate_request_t *>(h), entry};
}

void Registry::free(pstate_request_t *h) noexcept {
  std::unordered_map<uintptr_t, RequestEntry>::node_type gone;  // destroyed after the unlock
  std::lock_guard<std::mutex> lock(mu_);
  gone = entries_.extract(reinterpret_cast<uintptr_t>(h));
}

}  // namespace

RequestClaim::RequestClaim(RequestClaim &&other) noexcept : handle_(other.handle_), entry_(other.entry_) {
  other.entry_ = nullptr;
}

RequestClaim &RequestClaim::operator=(RequestClaim &&other) noexcept {
  if (this != &other) {
    keep();
    handle_ = other.handle_;
    entry_ = other.entry_;
    other.entry_ = nullptr;
  }
  return *this;
}

void RequestClaim::keep() noexcept {
  if (entry_ == nullptr) return;
  entry_->claimed.store(false, std::memory_order_release);
  entry_ = nullptr;
}

void RequestClaim::free() noexcept {
  if (entry_ == nullptr) return;
  entry_ = nullptr;
  registry().free(handle_);
}

RequestClaim RequestHandles::make() {
  const Registry::Made m = registry().make();
  return RequestClaim(m.handle, m.entry);
}

RequestClaim RequestHandles::claim(const pstate_request_t *h) {
  if (h == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, "req is NULL");
  const Registry::Made m = registry().claim(h);
  return RequestClaim(m.handle, m.entry);
}

}  // namespace pstate::api
