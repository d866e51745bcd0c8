// group_memory.hpp — a group's device memory and registered buffers (NCCL symmetric
// memory, SGLang's use_symmetric_memory / pynccl allocator, vLLM's VLLM_USE_NCCL_SYMM_MEM).
//
// GroupMemory holds what pstate_mem_* made for one group, in one CUDA context:
//   blocks         collective allocations (pstate_mem_alloc before a reserve, and the reserve of
//                  pstate_mem_pool_reserve), from ncclMemAlloc (cudaMalloc without NCCL), each
//                  registered ONCE as a symmetric window (ncclCommWindowRegister,
//                  NCCL_WIN_COLL_SYMMETRIC) on the group's NCCL communicator. Every rank holds
//                  the same blocks in the same order, so window registration, which NCCL makes
//                  collective, happens at the same point on every rank;
//   pool pieces    local allocations carved first-fit (256-byte aligned) out of the reserve: no
//                  NCCL call, no communication, so a pool that runs out is NO_MEMORY naming the
//                  reserve on that rank only, never a collective that one rank misses (the
//                  deadlock of sglang #36943);
//   registrations  user buffers registered with ncclCommRegister (local), by pstate_mem_register
//                  or by pstate_graph_capture_end for the buffers a capture used; a range inside a
//                  block or an earlier registration is never registered again (nccl #2331:
//                  registering one allocation repeatedly exhausts NCCL's address space).
//
// Windows and registrations follow the communicator. A registration belongs to one NCCL
// communicator; when the group's is made anew or shrunk (pstate_shrink hands the world's
// GroupMemory to the new world group), sync() registers every block again on the new one, at a
// point every rank of the group reaches (a collective of the group, pstate_mem_*, graph capture
// begin, pstate_shrink). Fallback to plain device memory: a group of one, an NCCL older than
// 2.27, or NCCL refusing a window on any rank (the ranks agree, so all or none hold it): said once
// per group at INFO. The caller (group_memory.cpp's users in group.cpp / group_device.cpp) owns
// the agreement: `agree(flag)` returns the minimum of flag over the group's ranks.
#pragma once

#include "transport/nccl/device_comm.hpp"

#include <pstate/pstate.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace pstate {

class GroupMemory {
 public:
  using AgreeMin = std::function<int(int)>;

  GroupMemory(DeviceContext &device, std::string group_name, const Logger &log);
  ~GroupMemory();  // frees without NCCL calls: release() first where the communicator is live
  GroupMemory(const GroupMemory &) = delete;
  GroupMemory &operator=(const GroupMemory &) = delete;

  // The group it serves now (pstate_shrink renames: "world" of the new world).
  void rename(std::string group_name) { group_ = std::move(group_name); }
  bool has_pool() const { return pool_ >= 0; }
  // Whether p lies in the reserve. The pool's first piece starts at the reserve's own address, so
  // a pointer there is a piece (or no allocation at all), never the reserve: the reserve is no
  // pointer of pstate_mem_alloc's and goes only with the group.
  bool in_pool(const void *p) const;
  // 1, 2, ...: p starts the n-th live collective allocation of pstate_mem_alloc, oldest first
  // (the same number on every rank: the ranks make and free them together); 0: it starts none.
  size_t allocation_number(const void *p) const;

  // A collective allocation (pool: the reserve). The ranks agreed on bytes; here: allocate,
  // agree that every rank has it, then the window (agreed too). Throws NO_MEMORY on every rank
  // when any rank could not allocate.
  void *alloc_block(size_t bytes, bool pool, DeviceComm *comm, const AgreeMin &agree, const char *call);
  // Frees a collective allocation (window deregistered first). p must have an allocation_number.
  void free_block(void *p, DeviceComm *comm);
  size_t block_bytes(const void *p) const;
  // Local: a piece of the reserve. NO_MEMORY naming the reserve when it does not fit.
  void *pool_alloc(size_t bytes, const char *call);
  void pool_free(void *p, const char *call);

  // Local registration of [p, p + bytes) (ncclCommRegister when the communicator exists, else at
  // its next sync). Inside a block or an earlier registration: counted, not registered again.
  void register_buffer(void *p, size_t bytes, DeviceComm *comm, bool from_graph);
  void deregister_buffer(void *p, DeviceComm *comm, const char *call);

  // Windows and registrations onto the group's current communicator (see above). collective:
  // every rank of the group is at this point (windows may be registered); otherwise only the
  // local registrations are.
  void sync(DeviceComm &comm, bool collective, const AgreeMin &agree);
  // Everything deregistered (when comm is the one they belong to) and freed.
  void release(DeviceComm *comm) noexcept;
  // pstate_abort: nothing is deregistered or freed from now on (freeing device memory may wait
  // for the device, and abort never waits): the memory goes with the process, as the aborted
  // communicator's own buffers do.
  void abandon() noexcept { abandoned_ = true; }

  // The path a device collective with these buffers takes, counted (pstate_group_mem_stats);
  // UNSUPPORTED for symmetric memory inside a CUDA graph capture on NCCL < 2.30.7 (sglang
  // #37768). recv may equal send.
  pstate_mem_path_t note_call(const void *send, size_t send_bytes, const void *recv, size_t recv_bytes,
                              bool capturing, const char *call);
  // Capture mode: remember the buffers of captured collectives; at capture end register them.
  void record_graph_buffer(const void *p, size_t bytes);
  void register_graph_buffers(DeviceComm *comm);

  pstate_mem_info_t query(const void *p) const;
  pstate_mem_stats_t stats() const;

 private:
  struct Block {
    void *base = nullptr;
    size_t bytes = 0;
    bool from_nccl = false;
    bool pool = false;
    void *window = nullptr;  // on windows_comm_
  };
  struct Registration {
    void *base = nullptr;
    size_t bytes = 0;
    void *handle = nullptr;
    const void *comm = nullptr;  // the communicator handle belongs to (or was tried on)
    int refs = 1;
  };
  const Block *find_block(const void *p, bool any_inside) const;
  Block *find_block(const void *p);
  const Registration *find_registration(const void *p) const;
  bool symmetric_at(const void *p, size_t bytes) const;
  bool registered_at(const void *p, size_t bytes) const;
  void register_window(Block &b, DeviceComm &comm, const AgreeMin &agree);
  void fallback_once(const std::string &why);

  DeviceContext &device_;
  std::string group_;
  Logger log_;
  std::vector<Block> blocks_;
  std::vector<Registration> registrations_;
  const void *windows_comm_ = nullptr;  // the communicator every block's window was registered on
  bool synced_ = false;                 // windows_comm_ is meaningful
  bool said_fallback_ = false;
  bool abandoned_ = false;
  bool said_registration_refused_ = false;
  std::string fallback_;  // why the group's memory has no windows ("" while it can have them)
  long pool_ = -1;        // index of the reserve in blocks_
  std::map<size_t, size_t> pieces_;  // reserve offset -> bytes
  size_t pool_used_ = 0;
  std::vector<std::pair<const void *, size_t>> graph_buffers_;
  uint64_t calls_[4] = {0, 0, 0, 0};
  pstate_mem_path_t last_path_ = PSTATE_MEM_PATH_NONE;
};

}  // namespace pstate
