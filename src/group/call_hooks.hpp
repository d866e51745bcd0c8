// call_hooks.hpp — the hooks of pstate_add_hook: callbacks of the runtime before and after every
// call of a group and once when the context fails or is aborted (torchcomms' pre/post/abort hooks),
// and pstate's own NaN/Inf check (PSTATE_NAN_CHECK=1), which is one of them. docs/hooks.md.
//
// Where they run: the group's call points, the same ones the call observer records at (run,
// run_p2p, traced, run_device, the requests): BEFORE when the call is about to begin (after its
// argument checks, before it is numbered), AFTER with the call's status and duration. A BEFORE
// hook that returns nonzero refuses the call; for a collective the group makes that refusal
// everyone's (pstate_group_s::refuse: the refusal takes part in the agreement). ABORT runs once per
// context: in Context::poison (the first failure, on the thread that fails it) or in
// Context::request_abort (pstate_revoke / pstate_abort, on the watchdog's thread), whichever
// comes first.
//
// Cost when no hook is registered: the call points ask active(), one load and a branch. The list
// is read by the driving thread and, for ABORT, by any thread, while the driving thread changes it
// (add/remove hold the context, ContextEntry): so it is an immutable vector behind an atomic
// pointer, each change publishes a new one, and the old ones stay until the context ends (a
// watchdog may still be walking one; hooks are few and change seldom).
#pragma once

#include "common/error.hpp"

#include <pstate/pstate.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pstate {

class CallHooks {
 public:
  struct Hook {
    uint64_t id;
    pstate_hook_fn fn;
    void *user;
  };

  // Whether any hook is registered (the call path's only question when none is).
  bool active() const noexcept { return list_.load(std::memory_order_acquire) != nullptr; }
  // Whether a call beginning now is hooked: a hook is registered and no hooked call is in
  // progress on this context (the operations a call is made of, a refusal's agreement, are its
  // own, not the caller's: a tensor dict is one call to the hooks). Driving thread.
  bool wanted() const noexcept { return nesting_ == 0 && active(); }
  void enter() noexcept { ++nesting_; }
  void leave() noexcept { --nesting_; }

  uint64_t add(pstate_hook_fn fn, void *user);
  void remove(uint64_t id);  // INVALID_ARGUMENT naming the id when there is no such hook

  // The next call's id (BEFORE of a call takes one; its AFTER carries the same).
  uint64_t next_call_id() noexcept { return ++calls_; }

  // Runs every hook with info (phase BEFORE): the first nonzero return refuses the call; returns
  // that hook's id and status (0 / OK: none refused). Later hooks are not run after a refusal.
  struct Refusal {
    uint64_t hook = 0;
    pstate_status_t status = PSTATE_OK;
    pstate_hook_fn fn = nullptr;
  };
  Refusal before(const pstate_call_info_t &info) const;
  void after(const pstate_call_info_t &info) const noexcept;
  // ABORT: once per context (the first caller runs the hooks; later ones return at once).
  void abort(const char *operation, pstate_status_t status, const std::string &message) noexcept;

  // pstate's NaN/Inf check (PSTATE_NAN_CHECK=1): a C hook whose user is the context's log; it
  // refuses a CPU call whose send data holds a NaN or an Inf of a floating dtype. The text of its
  // last refusal (this thread's) names the group, the call and the first bad element.
  static pstate_status_t nan_check(void *user, const pstate_call_info_t *info);
  static const std::string &nan_check_text();

 private:
  using List = std::vector<Hook>;
  std::atomic<const List *> list_{nullptr};
  std::vector<std::unique_ptr<const List>> kept_;  // every list ever published (owner thread)
  std::mutex mutex_;                               // kept_ and the next id against each other
  uint64_t next_id_ = 0;
  uint64_t calls_ = 0;  // the driving thread's
  int nesting_ = 0;     // hooked calls in progress (the driving thread's)
  std::atomic<bool> aborted_{false};
};

// Fills the common fields of an info for one call (the phase-specific ones are the caller's).
// The info points at group, operation and path: they must outlive every hook's use of it (a
// group's name, string literals).
pstate_call_info_t call_info(pstate_hook_phase_t phase, uint64_t call_id, const char *group, const char *operation,
                             uint64_t seq, uint64_t count, int dtype, int root, int peer, bool on_device,
                             uint64_t bytes, const char *path);

}  // namespace pstate
