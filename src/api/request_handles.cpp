// request_handles.cpp — the registry of requests (RequestRegistry): the reserved token region,
// the slot table under one mutex, claims, and the fork handlers of the process's registry.
// Why it is one per process, and what a token guarantees: request_handles.hpp.
#include "api/request_handles.hpp"

#include "common/error.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace pstate::api {
namespace {

constexpr size_t kFirstSlots = 64;
// A token whose slot holds a live request is skipped; this many in a row, and the table doubles
// (until it has a slot per token: then it skips on to a free one, if any).
constexpr uint64_t kSkipsBeforeGrowing = 4;
// The smallest region tried, after 2^max_bits, 2^(max_bits - 4), ...: 2^16 tokens.
constexpr unsigned kMinRegionBits = 16;

RequestRegistry *g_process = nullptr;  // set once, before the fork handlers that use it

}  // namespace

// Largest first: 2^40 tokens for the process (a fresh one per request for the life of any
// realistic process), down to 2^16 where mmap refuses more (sanitizers and valgrind manage their
// own address space; a finite RLIMIT_AS counts even PROT_NONE reservations: take 1/16 at most).
RequestRegistry::Region RequestRegistry::reserve_region(unsigned max_bits) {
  rlimit as{};
  const bool limited = ::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY;
  int error = ENOMEM;
  for (unsigned bits = max_bits;; bits = bits >= kMinRegionBits + 4 ? bits - 4 : kMinRegionBits) {
    const size_t size = size_t{1} << bits;
    if (!limited || size <= as.rlim_cur / 16) {
      void *p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) return {reinterpret_cast<uintptr_t>(p), size - 1, 0};
      error = errno;
    }
    if (bits <= kMinRegionBits) return {0, 0, error};
  }
}

RequestRegistry::RequestRegistry(unsigned max_region_bits)
    : region_(reserve_region(max_region_bits)), slots_(kFirstSlots) {}

RequestRegistry::~RequestRegistry() {
  if (region_.base != 0) ::munmap(reinterpret_cast<void *>(region_.base), region_.mask + 1);
}

void RequestRegistry::fork_prepare() { g_process->mu_.lock(); }
void RequestRegistry::fork_release() { g_process->mu_.unlock(); }

RequestRegistry &RequestRegistry::process() {
  static RequestRegistry *r = [] {
    g_process = new RequestRegistry(40);  // never destroyed (see request_handles.hpp)
    pthread_atfork(fork_prepare, fork_release, fork_release);
    return g_process;
  }();
  return *r;
}

RequestClaim RequestRegistry::make() {
  if (region_.base == 0)
    throw_error(PSTATE_ERR_NO_MEMORY, "no address space for request handles: mmap of a PROT_NONE region (64 KiB "
                "to 1 TiB, none of it memory) failed: ", std::strerror(region_.error),
                "; is the address-space limit (ulimit -v) very low?");
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t skipped = 0;; ++skipped) {
    if (skipped >= kSkipsBeforeGrowing && slots_.size() <= region_.mask) {
      grow();
      skipped = 0;
    } else if (skipped > region_.mask) {  // a slot per token, and every one live
      throw_error(PSTATE_ERR_NO_MEMORY, "all ", region_.mask + 1, " request handles are in use: complete "
                  "requests (pstate_wait / pstate_test) before posting more");
    }
    const uintptr_t offset = next_++ & region_.mask;
    Slot &slot = slots_[offset & (slots_.size() - 1)];
    if (!slot.entry) slot.entry = std::make_unique<RequestEntry>();
    if (slot.entry->phase.load(std::memory_order_acquire) != RequestEntry::kFree)
      continue;  // the slot's request is still live: this token waits for the next round
    slot.offset = offset;
    slot.entry->phase.store(RequestEntry::kClaimed, std::memory_order_relaxed);
    return RequestClaim(reinterpret_cast<pstate_request_t *>(region_.base + offset), slot.entry.get());
  }
}

// Doubles the table: a token's slot in it is still its offset modulo the size, and two entries
// cannot meet in one slot (equal modulo 2n means equal modulo n: they would have shared one before).
void RequestRegistry::grow() {
  std::vector<Slot> bigger(slots_.size() * 2);
  for (Slot &s : slots_)
    if (s.entry) bigger[s.offset & (bigger.size() - 1)] = std::move(s);
  slots_.swap(bigger);
}

RequestClaim RequestRegistry::claim(const pstate_request_t *h) {
  if (h == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, "req is NULL");
  const auto offset = reinterpret_cast<uintptr_t>(h) - region_.base;
  RequestEntry *entry = nullptr;
  uint32_t phase = RequestEntry::kFree;
  if (region_.base != 0 && offset <= region_.mask) {  // anything else is refused without the lock
    std::lock_guard<std::mutex> lock(mu_);
    const Slot &slot = slots_[offset & (slots_.size() - 1)];
    if (slot.entry && slot.offset == offset) {
      entry = slot.entry.get();
      phase = entry->phase.load(std::memory_order_acquire);
      if (phase == RequestEntry::kLive) entry->phase.store(RequestEntry::kClaimed, std::memory_order_relaxed);
    }
  }
  if (phase == RequestEntry::kFree)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "req is not a live request: already completed and freed by an earlier "
                "pstate_wait / pstate_test, or never made by pstate_isend / pstate_irecv (a request is completed "
                "once; nothing was touched)");
  if (phase == RequestEntry::kClaimed)
    throw_error(PSTATE_ERR_BUSY, "req is in use by another thread's call right now (its pstate_wait / "
                "pstate_test, or the pstate_isend / pstate_irecv still posting it): complete each request from "
                "one thread; nothing was freed");
  return RequestClaim(const_cast<pstate_request_t *>(h), entry);
}

size_t RequestRegistry::slot_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.size();
}

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
  entry_->phase.store(RequestEntry::kLive, std::memory_order_release);
  entry_ = nullptr;
}

// The state is reset here, by its claimer, so the slot's next request starts from the default.
void RequestClaim::free() noexcept {
  if (entry_ == nullptr) return;
  entry_->state = RequestState{};
  entry_->phase.store(RequestEntry::kFree, std::memory_order_release);
  entry_ = nullptr;
}

}  // namespace pstate::api
