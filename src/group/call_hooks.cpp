// call_hooks.cpp — the hook list of a context (add, remove, run) and pstate's NaN/Inf check.
// See call_hooks.hpp for where the hooks run and why the list is published the way it is.
#include "group/call_hooks.hpp"

#include <cstring>

namespace pstate {

uint64_t CallHooks::add(pstate_hook_fn fn, void *user) {
  std::lock_guard<std::mutex> lock(mutex_);
  const List *old = list_.load(std::memory_order_acquire);
  auto next = std::make_unique<List>(old ? *old : List{});
  const uint64_t id = ++next_id_;
  next->push_back(Hook{id, fn, user});
  list_.store(next.get(), std::memory_order_release);
  kept_.push_back(std::move(next));
  return id;
}

void CallHooks::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const List *old = list_.load(std::memory_order_acquire);
  auto next = std::make_unique<List>();
  bool found = false;
  if (old)
    for (const Hook &h : *old) {
      if (h.id == id)
        found = true;
      else
        next->push_back(h);
    }
  if (!found)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "pstate_remove_hook: no hook ", id,
                " on this context (an id pstate_add_hook returned and not removed yet)");
  list_.store(next->empty() ? nullptr : next.get(), std::memory_order_release);
  kept_.push_back(std::move(next));
}

CallHooks::Refusal CallHooks::before(const pstate_call_info_t &info) const {
  const List *l = list_.load(std::memory_order_acquire);
  if (l == nullptr) return {};
  for (const Hook &h : *l) {
    const pstate_status_t s = h.fn(h.user, &info);
    if (s != PSTATE_OK) return Refusal{h.id, s, h.fn};
  }
  return {};
}

void CallHooks::after(const pstate_call_info_t &info) const noexcept {
  const List *l = list_.load(std::memory_order_acquire);
  if (l == nullptr) return;
  for (const Hook &h : *l) h.fn(h.user, &info);
}

void CallHooks::abort(const char *operation, pstate_status_t status, const std::string &message) noexcept {
  if (list_.load(std::memory_order_acquire) == nullptr) return;
  if (aborted_.exchange(true, std::memory_order_acq_rel)) return;
  pstate_call_info_t info = call_info(PSTATE_HOOK_ABORT, 0, "", operation, UINT64_MAX, 0, -1, -1, -1, false, 0, "none");
  info.status = status;
  info.message = message.c_str();
  after(info);
}

pstate_call_info_t call_info(pstate_hook_phase_t phase, uint64_t call_id, const char *group, const char *operation,
                             uint64_t seq, uint64_t count, int dtype, int root, int peer, bool on_device,
                             uint64_t bytes, const char *path) {
  pstate_call_info_t i;
  std::memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  i.phase = phase;
  i.status = PSTATE_OK;
  i.call_id = call_id;
  i.group = group;
  i.operation = operation;
  i.seq = seq;
  i.count = count;
  i.dtype = dtype;
  i.root = root;
  i.peer = peer;
  i.on_device = on_device ? 1 : 0;
  i.bytes = bytes;
  i.path = path;
  return i;
}

// ---- the NaN/Inf check ----------------------------------------------------------------------
// A floating-point value is NaN or Inf when its exponent bits are all ones (IEEE 754 and bf16;
// fp8 E5M2 alike; fp8 E4M3 has no Inf and one NaN pattern per sign, S.1111.111). The scan stops
// at the first such element; integer dtypes and device memory are not looked at.
namespace {

thread_local std::string t_nan_text;

template <typename U>
bool find_bad(const void *p, uint64_t n, U exp_mask, U mant_mask, uint64_t *index, bool *nan) {
  const U *v = static_cast<const U *>(p);
  for (uint64_t i = 0; i < n; ++i) {
    U x;
    std::memcpy(&x, v + i, sizeof x);
    if ((x & exp_mask) == exp_mask) {
      *index = i;
      *nan = (x & mant_mask) != 0;
      return true;
    }
  }
  return false;
}

}  // namespace

pstate_status_t CallHooks::nan_check(void *, const pstate_call_info_t *info) {
  if (info->phase != PSTATE_HOOK_BEFORE || info->on_device || info->send == nullptr || info->send_bytes == 0)
    return PSTATE_OK;
  uint64_t index = 0;
  bool nan = false, bad = false;
  const uint64_t b = info->send_bytes;
  switch (info->dtype) {
    case PSTATE_FLOAT16:
      bad = find_bad<uint16_t>(info->send, b / 2, 0x7C00u, 0x03FFu, &index, &nan);
      break;
    case PSTATE_BFLOAT16:
      bad = find_bad<uint16_t>(info->send, b / 2, 0x7F80u, 0x007Fu, &index, &nan);
      break;
    case PSTATE_FLOAT32:
      bad = find_bad<uint32_t>(info->send, b / 4, 0x7F800000u, 0x007FFFFFu, &index, &nan);
      break;
    case PSTATE_FLOAT64:
      bad = find_bad<uint64_t>(info->send, b / 8, 0x7FF0000000000000ull, 0x000FFFFFFFFFFFFFull, &index, &nan);
      break;
    case PSTATE_FP8_E4M3:
      bad = find_bad<uint8_t>(info->send, b, 0x7Fu, 0x7Fu, &index, &nan);
      break;
    case PSTATE_FP8_E5M2:
      bad = find_bad<uint8_t>(info->send, b, 0x7Cu, 0x03u, &index, &nan);
      break;
    default:
      return PSTATE_OK;
  }
  if (!bad) return PSTATE_OK;
  t_nan_text = cat("PSTATE_NAN_CHECK: ", info->operation, " on group ", info->group, ": send[", index, "] is ",
                   nan ? "NaN" : "Inf", " (", pstate_dtype_name(static_cast<pstate_dtype_t>(info->dtype)), ", the first bad one of ",
                   b / pstate_dtype_size(static_cast<pstate_dtype_t>(info->dtype)), " elements sent); no data left this rank");
  return PSTATE_ERR_INVALID_ARGUMENT;
}

const std::string &CallHooks::nan_check_text() { return t_nan_text; }

}  // namespace pstate
