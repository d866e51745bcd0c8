// group_mem.cpp — the group's side of group memory: pstate_mem_* on one group, the
// ranks' agreement, and the hooks of device collectives and graph capture. What memory, windows
// and registrations are is group_memory.hpp's; here is when they are made and who agrees.
//
// Agreement: a collective call (pstate_mem_alloc without a pool, pstate_mem_pool_reserve,
// pstate_mem_free of a collective allocation) first all-gathers every rank's record (the size and,
// for a free, which allocation: its number, oldest live one first) over the group's CPU
// communicator as an object call of its own kind (kMemAlloc, kMemReserve, kMemFree: a rank in one
// and a rank in any other call disagree like two different collectives); ranks whose records
// differ all throw MISMATCH naming every record, with nothing allocated or freed. A rank that
// refuses its own arguments (0 bytes, past 2^47, out NULL, a pointer that is no group memory)
// takes part in that exchange as a refusal (pstate_group_s::refuse), so every rank returns
// INVALID_ARGUMENT and the group goes on; the exchange is an object call, not a data collective,
// because only an object call's arrival meets a refusal in shared memory (a data collective's
// inline lines would take it for a mismatch and fail the context). Then each rank allocates, and
// one all_reduce (MIN) of "I have it" makes the outcome common (NO_MEMORY on every rank when one
// failed), and one more per window (group_memory.cpp) before a window is kept.
//
// Local calls stay local, and so do their refusals: a pool's pieces (allocated and freed without
// communicating; the first piece starts at the reserve's own address, so "is it in the pool?" is
// asked before "is it a collective allocation?"), and every call of a CPU context (UNSUPPORTED on
// every rank, or this rank's argument error first).
#include "group/context.hpp"
#include "group/group.hpp"

#include <cstring>

namespace pstate {
namespace {

bool fatal_status(pstate_status_t s) {
  return s == PSTATE_ERR_TIMEOUT || s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_TRANSPORT ||
         s == PSTATE_ERR_INTERNAL || s == PSTATE_ERR_ABORTED;
}

}  // namespace
}  // namespace pstate

using pstate::OpKind;

pstate::GroupMemory &pstate_group_s::memory(const char *call) {
  check_alive(call);
  pstate::DeviceContext *device = ctx_.device_context();
  if (device == nullptr)
    pstate::throw_error(PSTATE_ERR_UNSUPPORTED, name_, ": ", call, ": group memory and registered buffers need a CUDA "
                        "context (device = PSTATE_DEVICE_CUDA); this context is CPU");
  if (!memory_) memory_ = std::make_unique<pstate::GroupMemory>(*device, name_, ctx_.log());
  return *memory_;
}

int pstate_group_s::agree_min(int flag) {
  int all = flag;
  all_reduce(&flag, &all, 1, PSTATE_INT32, PSTATE_MIN, OpKind::kMemAlloc);
  return all;
}

void pstate_group_s::agree_memory_call(OpKind kind, const char *call, uint64_t bytes, uint64_t allocation) {
  const uint64_t mine[2] = {bytes, allocation};
  std::vector<size_t> lengths;
  const pstate::Bytes all = all_gather_object(mine, sizeof mine, &lengths, kind);
  const auto n = static_cast<size_t>(size());
  std::vector<uint64_t> sizes(n), allocations(n);
  bool same_size = true, same_allocation = true;
  for (size_t r = 0; r < n; ++r) {
    if (lengths.size() != n || lengths[r] != sizeof mine)
      pstate::throw_error(PSTATE_ERR_MISMATCH, name_, ": ", call, ": group rank ", r, " sent a record of ",
                          r < lengths.size() ? lengths[r] : 0, " bytes, not ", sizeof mine,
                          ": every rank of the group must run the same pstate");
    std::memcpy(&sizes[r], all.data() + r * sizeof mine, 8);
    std::memcpy(&allocations[r], all.data() + r * sizeof mine + 8, 8);
    same_size = same_size && sizes[r] == bytes;
    same_allocation = same_allocation && allocations[r] == allocation;
  }
  if (same_size && same_allocation) return;
  std::string list;
  for (size_t r = 0; r < n; ++r) {
    list += pstate::cat(r ? ", " : "", "rank ", global_[r], " (group rank ", r, ") ");
    list += kind == OpKind::kMemFree ? pstate::cat("allocation #", allocations[r], " of ", sizes[r], " bytes")
                                     : pstate::cat(sizes[r], " bytes");
  }
  if (kind == OpKind::kMemFree)
    pstate::throw_error(PSTATE_ERR_MISMATCH, name_, ": ", call, ": the ranks disagree about which allocation to free (",
                        list, "; numbered in the order pstate_mem_alloc made them, oldest live one first): it is "
                        "collective, every rank frees its memory of the same pstate_mem_alloc call; nothing was freed "
                        "on any rank");
  pstate::throw_error(PSTATE_ERR_MISMATCH, name_, ": ", call, ": the ranks disagree about the size (", list,
                      "): it is collective, every rank passes the same size; nothing was allocated on any rank");
}

void *pstate_group_s::collective_block(size_t bytes, bool pool, OpKind kind, const char *call,
                                       const pstate::Error *refused) {
  pstate::GroupMemory &m = memory(call);
  ctx_.require_not_capturing(call);
  try {
    if (refused != nullptr)  // the peers are in this call too: they learn of the refusal
      refuse(kind, -1, bytes,
             pstate::Error(refused->status(),
                           pstate::cat(name_, " rank ", ctx_.rank(), ": ", refused->what(), " (refused on every rank "
                                       "of the group: the others return INVALID_ARGUMENT naming this rank; nothing "
                                       "was allocated, the group goes on)")));
    agree_memory_call(kind, call, bytes, 0);
    pstate::DeviceComm &comm = device_comm();
    return m.alloc_block(bytes, pool, &comm, [this](int flag) { return agree_min(flag); }, call);
  } catch (const pstate::Error &e) {
    if (pstate::fatal_status(e.status())) device_op_failed(e, call);
    throw;
  }
}

void *pstate_group_s::mem_alloc(size_t bytes, const pstate::Error *refused) {
  constexpr const char *kCall = "pstate_mem_alloc";
  if (refused != nullptr && ctx_.device_context() == nullptr) throw *refused;  // CPU: nothing is collective
  pstate::GroupMemory &m = memory(kCall);
  if (m.has_pool()) {  // a piece of the reserve: local, and so is its refusal
    if (refused != nullptr) throw *refused;
    return m.pool_alloc(bytes, kCall);
  }
  return collective_block(bytes, false, OpKind::kMemAlloc, kCall, refused);
}

void pstate_group_s::mem_pool_reserve(size_t bytes, const pstate::Error *refused) {
  constexpr const char *kCall = "pstate_mem_pool_reserve";
  if (refused != nullptr && ctx_.device_context() == nullptr) throw *refused;  // CPU: nothing is collective
  pstate::GroupMemory &m = memory(kCall);
  if (m.has_pool())  // every rank has it (the reserve was agreed): every rank returns this, locally
    pstate::throw_error(PSTATE_ERR_INVALID_STATE, name_, ": ", kCall, ": the group has its pool already "
                        "(once per group: the pool never grows, as growing it would be collective)");
  collective_block(bytes, true, OpKind::kMemReserve, kCall, refused);
}

void pstate_group_s::mem_free(void *p) {
  constexpr const char *kCall = "pstate_mem_free";
  pstate::GroupMemory &m = memory(kCall);
  // Pool memory first: the first piece starts where the reserve does, and a piece is local.
  if (m.in_pool(p)) return m.pool_free(p, kCall);
  ctx_.require_not_capturing(kCall);
  try {
    const size_t allocation = m.allocation_number(p);
    if (allocation == 0)  // the peers are in this call too, with their own pointers: they learn of it
      refuse(OpKind::kMemFree, -1, 0,
             pstate::Error(PSTATE_ERR_INVALID_ARGUMENT,
                           pstate::cat(name_, " rank ", ctx_.rank(), ": ", kCall, ": ", p, " is not the start of group "
                                       "memory of this group (pstate_mem_alloc's pointer, not yet freed): refused on "
                                       "every rank of the group (the others return INVALID_ARGUMENT naming this "
                                       "rank); nothing was freed on any rank, the group goes on")));
    agree_memory_call(OpKind::kMemFree, kCall, m.block_bytes(p), allocation);
    m.free_block(p, device_comm_.get());
  } catch (const pstate::Error &e) {
    if (pstate::fatal_status(e.status())) device_op_failed(e, kCall);
    throw;
  }
}

void pstate_group_s::mem_register(void *p, size_t bytes) {
  constexpr const char *kCall = "pstate_mem_register";
  pstate::GroupMemory &m = memory(kCall);
  ctx_.device_context()->require_device_pointer(p, "ptr", pstate::cat(name_, ": ", kCall));
  ctx_.device_context()->require_device_pointer(static_cast<char *>(p) + bytes - 1, "the end of ptr",
                                                pstate::cat(name_, ": ", kCall));
  m.register_buffer(p, bytes, ctx_.capturing() ? nullptr : &device_comm(), false);
}

void pstate_group_s::mem_deregister(void *p) {
  memory("pstate_mem_deregister").deregister_buffer(p, device_comm_.get(), "pstate_mem_deregister");
}

pstate_mem_info_t pstate_group_s::mem_query(const void *p) {
  return memory("pstate_mem_query").query(p);
}

pstate_mem_stats_t pstate_group_s::mem_stats() {
  pstate::GroupMemory &m = memory("pstate_group_mem_stats");
  pstate_mem_stats_t s = m.stats();
  if (s.nccl_version == 0) s.nccl_version = ctx_.device_context()->nccl_version();
  // Before any allocation: whether this group's memory would get windows.
  if (s.allocated == 0 && s.symmetric_available == 1 && device_comm_)
    s.symmetric_available = device_comm_->windows_unavailable().empty() ? 1 : 0;
  else if (s.allocated == 0 && s.symmetric_available == 1)
    s.symmetric_available = size() > 1 && ctx_.device_context()->nccl_version() >= 22700 ? 1 : 0;
  return s;
}

void pstate_group_s::note_device_call(const void *send, size_t send_bytes, const void *recv, size_t recv_bytes,
                                      const char *call) {
  const bool capturing = ctx_.capturing();
  const bool record = capturing && ctx_.graph_registration();
  if (!memory_ && !record) return;  // no group memory, nothing to record: nothing to count
  pstate::GroupMemory &m = memory(call);
  m.note_call(send, send_bytes, recv, recv_bytes, capturing, call);
  if (record) {
    m.record_graph_buffer(send, send_bytes);
    if (recv != send) m.record_graph_buffer(recv, recv_bytes);
  }
}

void pstate_group_s::register_graph_buffers() {
  if (memory_ && !retired_) memory_->register_graph_buffers(device_comm_.get());
}

void pstate_group_s::sync_memory(const char *call) {
  if (!memory_ || retired_ || ctx_.capturing()) return;
  try {
    memory_->sync(device_comm(), true, [this](int flag) { return agree_min(flag); });
  } catch (const pstate::Error &e) {
    device_op_failed(e, call);
    throw pstate::Error(e.status(), pstate::cat(call, ": ", e.what()));
  }
}

void pstate_group_s::adopt_memory(std::unique_ptr<pstate::GroupMemory> m) {
  memory_ = std::move(m);
  if (memory_) memory_->rename(name_);
}
