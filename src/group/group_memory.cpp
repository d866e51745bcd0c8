// group_memory.cpp — a group's device memory, its symmetric windows, its pool and its registered
// buffers (see group_memory.hpp for the rules; the agreement between ranks is the caller's).
#include "group/group_memory.hpp"

#include "common/error.hpp"

#include <algorithm>

namespace pstate {

namespace {
constexpr size_t kAlign = 256;
// NCCL_VERSION(2, 30, 7): the first NCCL whose symmetric kernels are right in captured graphs
constexpr int kSymmetricGraphVersion = 2 * 10000 + 30 * 100 + 7;  // what cudaMalloc guarantees, and more than any dtype needs

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool inside(const void *p, size_t bytes, const void *base, size_t base_bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base);
  return a >= b && a - b <= base_bytes && bytes <= base_bytes - (a - b);
}
bool overlaps(const void *p, size_t bytes, const void *base, size_t base_bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base);
  return a < b + base_bytes && b < a + bytes;
}
}  // namespace

GroupMemory::GroupMemory(DeviceContext &device, std::string group_name, const Logger &log)
    : device_(device), group_(std::move(group_name)), log_(log) {}

GroupMemory::~GroupMemory() { release(nullptr); }

const GroupMemory::Block *GroupMemory::find_block(const void *p, bool any_inside) const {
  for (const Block &b : blocks_)
    if (any_inside ? inside(p, 1, b.base, b.bytes) : p == b.base) return &b;
  return nullptr;
}
GroupMemory::Block *GroupMemory::find_block(const void *p) {
  for (Block &b : blocks_)
    if (p == b.base) return &b;
  return nullptr;
}

size_t GroupMemory::allocation_number(const void *p) const {
  size_t n = 0;
  for (const Block &b : blocks_) {
    if (b.pool) continue;
    ++n;
    if (b.base == p) return n;
  }
  return 0;
}

bool GroupMemory::in_pool(const void *p) const {
  return pool_ >= 0 && inside(p, 1, blocks_[static_cast<size_t>(pool_)].base, blocks_[static_cast<size_t>(pool_)].bytes);
}

void GroupMemory::fallback_once(const std::string &why) {
  if (said_fallback_) return;
  said_fallback_ = true;
  log_.info(group_, ": group memory is plain device memory, without NCCL symmetric windows (", why,
            "): collectives on it take NCCL's ordinary path");
}

void GroupMemory::register_window(Block &b, DeviceComm &comm, const AgreeMin &agree) {
  b.window = nullptr;
  std::string why = fallback_;
  void *window = why.empty() ? comm.window_register(b.base, b.bytes, &why) : nullptr;
  // NCCL makes the window collectively; pstate makes the outcome common too: a window that one
  // rank could not get is dropped by all, so no rank's kernels expect a peer's missing window.
  const int all = agree(window != nullptr ? 1 : 0);
  if (all == 1) {
    b.window = window;
    return;
  }
  if (window != nullptr) comm.window_deregister(window);
  fallback_once(window != nullptr ? std::string("another rank's NCCL refused the window") : why);
}

void *GroupMemory::alloc_block(size_t bytes, bool pool, DeviceComm *comm, const AgreeMin &agree, const char *call) {
  bytes = round_up(bytes);
  Block b;
  b.pool = pool;
  std::string failed;
  try {
    b.base = device_.mem_alloc(bytes, &b.from_nccl, cat(group_, ": ", call));
  } catch (const Error &e) {
    failed = e.what();
  }
  b.bytes = bytes;
  if (agree(b.base != nullptr ? 1 : 0) != 1) {
    device_.mem_free(b.base, b.from_nccl);
    throw_error(PSTATE_ERR_NO_MEMORY, failed.empty() ? cat(group_, ": ", call, " of ", bytes, " bytes: another rank "
                                                           "of the group could not allocate it; nothing was allocated")
                                                     : failed);
  }
  if (comm != nullptr && fallback_.empty()) fallback_ = comm->windows_unavailable();
  if (!fallback_.empty()) fallback_once(fallback_);
  // The earlier blocks onto the communicator first (made anew since: their windows went with it)
  if (comm != nullptr && fallback_.empty() && synced_ && windows_comm_ != comm->nccl_handle()) sync(*comm, true, agree);
  blocks_.push_back(b);
  if (pool) {
    pool_ = static_cast<long>(blocks_.size() - 1);
    pieces_.clear();
    pool_used_ = 0;
  }
  Block &added = blocks_.back();
  if (comm != nullptr && fallback_.empty()) {
    register_window(added, *comm, agree);
    windows_comm_ = comm->nccl_handle();
    synced_ = true;
  }
  log_.info(group_, ": ", call, ": ", bytes, " bytes at ", added.base, added.window != nullptr ? " (symmetric window)" : " (plain)");
  return added.base;
}

size_t GroupMemory::block_bytes(const void *p) const {
  const Block *b = find_block(p, false);
  return b != nullptr ? b->bytes : 0;
}

void GroupMemory::free_block(void *p, DeviceComm *comm) {
  auto it = std::find_if(blocks_.begin(), blocks_.end(), [p](const Block &b) { return b.base == p && !b.pool; });
  if (it == blocks_.end()) throw_error(PSTATE_ERR_INTERNAL, group_, ": free_block of no collective allocation");
  if (it->window != nullptr && comm != nullptr && comm->nccl_handle() == windows_comm_) comm->window_deregister(it->window);
  device_.mem_free(it->base, it->from_nccl);
  const long index = it - blocks_.begin();
  blocks_.erase(it);
  if (pool_ > index) --pool_;
}

void *GroupMemory::pool_alloc(size_t bytes, const char *call) {
  const Block &reserve = blocks_[static_cast<size_t>(pool_)];
  const size_t want = round_up(bytes);
  size_t at = 0, largest = 0;
  bool found = false;
  for (const auto &[offset, size] : pieces_) {  // first fit between pieces, in address order
    if (offset - at >= want) {
      found = true;
      break;
    }
    largest = std::max(largest, offset - at);
    at = offset + size;
  }
  if (!found) {
    const size_t tail = reserve.bytes - at;
    largest = std::max(largest, tail);
    if (tail < want)
      throw_error(PSTATE_ERR_NO_MEMORY, group_, ": ", call, " of ", bytes, " bytes from the group's pool: the reserve "
                  "of pstate_mem_pool_reserve holds ", reserve.bytes, " bytes, ", pool_used_, " in use, the largest "
                  "free range ", largest, " bytes; reserve more at start (the pool never grows: growing it would be "
                  "collective), or free pool memory first");
  }
  pieces_[at] = want;
  pool_used_ += want;
  return static_cast<char *>(reserve.base) + at;
}

void GroupMemory::pool_free(void *p, const char *call) {
  const Block &reserve = blocks_[static_cast<size_t>(pool_)];
  const size_t offset = static_cast<size_t>(static_cast<char *>(p) - static_cast<char *>(reserve.base));
  auto it = pieces_.find(offset);
  if (it == pieces_.end())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, group_, ": ", call, ": ", p, " lies in the group's pool but is not the "
                "start of a live allocation from it (freed twice, or a pointer into one",
                offset == 0 ? "; the reserve itself is freed with the group, by pstate_destroy_model_parallel or "
                              "pstate_finalize"
                            : "",
                "); nothing was freed, and no other rank was involved (pool memory is local)");
  pool_used_ -= it->second;
  pieces_.erase(it);
}

const GroupMemory::Registration *GroupMemory::find_registration(const void *p) const {
  for (const Registration &r : registrations_)
    if (inside(p, 1, r.base, r.bytes)) return &r;
  return nullptr;
}

void GroupMemory::register_buffer(void *p, size_t bytes, DeviceComm *comm, bool from_graph) {
  const char *call = from_graph ? "pstate_graph_capture_end" : "pstate_mem_register";
  for (const Block &b : blocks_)
    if (inside(p, bytes, b.base, b.bytes)) {
      if (from_graph) return;  // group memory: registered as a window already (or plain by fallback)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, group_, ": ", call, ": [", p, ", +", bytes, ") lies in group memory "
                  "of pstate_mem_alloc, which is registered with the group's communicator already (never twice: "
                  "nccl #2331); register only memory of your own");
    }
  for (Registration &r : registrations_) {
    if (inside(p, bytes, r.base, r.bytes)) {
      if (!from_graph) ++r.refs;  // the same allocation is never registered twice (nccl #2331)
      return;
    }
    if (overlaps(p, bytes, r.base, r.bytes))
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, group_, ": ", call, ": [", p, ", +", bytes, ") partly overlaps the "
                  "registration [", r.base, ", +", r.bytes, "): register one range that covers both, or disjoint ranges");
  }
  Registration r;
  r.base = p;
  r.bytes = bytes;
  registrations_.push_back(r);
  if (comm != nullptr) sync(*comm, false, nullptr);
}

void GroupMemory::deregister_buffer(void *p, DeviceComm *comm, const char *call) {
  auto it = std::find_if(registrations_.begin(), registrations_.end(), [p](const Registration &r) { return r.base == p; });
  if (it == registrations_.end())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, group_, ": ", call, ": no registration starts at ", p,
                " (pstate_mem_query names the start of the one that holds a pointer)");
  if (--it->refs > 0) return;
  if (it->handle != nullptr && comm != nullptr && comm->nccl_handle() == it->comm) comm->buffer_deregister(it->handle);
  registrations_.erase(it);
}

void GroupMemory::sync(DeviceComm &comm, bool collective, const AgreeMin &agree) {
  const void *now = comm.nccl_handle();
  if (collective && !blocks_.empty() && fallback_.empty() && (!synced_ || windows_comm_ != now)) {
    // Windows of another communicator went with it (made anew, or shrunk: pstate_shrink).
    for (Block &b : blocks_) b.window = nullptr;
    fallback_ = comm.windows_unavailable();
    if (!fallback_.empty()) {
      fallback_once(fallback_);
    } else {
      comm.ensure_ready();  // every rank is here: a communicator not made yet is made now
      for (Block &b : blocks_) register_window(b, comm, agree);
      log_.info(group_, ": ", blocks_.size(), " group memory allocation(s) registered on the group's NCCL communicator");
    }
    windows_comm_ = comm.nccl_handle();
    synced_ = true;
  }
  // Registrations waiting for the communicator: at a point every rank reaches it is made now
  // (the collective about to run would make it anyway), so that collective finds them registered.
  if (collective && comm.nccl_handle() == nullptr && !registrations_.empty()) comm.ensure_ready();
  now = comm.nccl_handle();
  if (now == nullptr) return;
  for (Registration &r : registrations_) {
    if (r.comm == now) continue;
    std::string why;
    r.handle = comm.buffer_register(r.base, r.bytes, &why);  // the old one's went with it
    r.comm = now;
    if (r.handle == nullptr && !said_registration_refused_) {
      said_registration_refused_ = true;
      log_.info(group_, ": buffer registration refused (", why, "): the buffer stays unregistered, collectives on it "
                "take NCCL's ordinary path");
    }
  }
}

void GroupMemory::release(DeviceComm *comm) noexcept {
  if (abandoned_) return;
  const void *now = comm != nullptr ? comm->nccl_handle() : nullptr;
  for (Registration &r : registrations_)
    if (r.handle != nullptr && now != nullptr && r.comm == now) comm->buffer_deregister(r.handle);
  registrations_.clear();
  for (Block &b : blocks_) {
    if (b.window != nullptr && now != nullptr && windows_comm_ == now) comm->window_deregister(b.window);
    device_.mem_free(b.base, b.from_nccl);
  }
  blocks_.clear();
  pool_ = -1;
  pieces_.clear();
  pool_used_ = 0;
}

bool GroupMemory::symmetric_at(const void *p, size_t bytes) const {
  for (const Block &b : blocks_)
    if (b.window != nullptr && inside(p, bytes, b.base, b.bytes)) return true;
  return false;
}

bool GroupMemory::registered_at(const void *p, size_t bytes) const {
  if (symmetric_at(p, bytes)) return true;
  for (const Registration &r : registrations_)
    if (r.handle != nullptr && inside(p, bytes, r.base, r.bytes)) return true;
  return false;
}

pstate_mem_path_t GroupMemory::note_call(const void *send, size_t send_bytes, const void *recv, size_t recv_bytes,
                                         bool capturing, const char *call) {
  pstate_mem_path_t path = PSTATE_MEM_PATH_PLAIN;
  if (symmetric_at(send, send_bytes) && symmetric_at(recv, recv_bytes)) path = PSTATE_MEM_PATH_SYMMETRIC;
  else if (registered_at(send, send_bytes) && registered_at(recv, recv_bytes)) path = PSTATE_MEM_PATH_REGISTERED;
  if (capturing && path == PSTATE_MEM_PATH_SYMMETRIC && device_.nccl_version() < kSymmetricGraphVersion)
    throw_error(PSTATE_ERR_UNSUPPORTED, group_, ": ", call, " on symmetric memory while capturing a CUDA graph: NCCL ",
                device_.nccl_version(), " is older than 2.30.7, whose symmetric kernels gave silently wrong results "
                "in captured graphs (sglang #37768); capture this call with plain buffers, or load NCCL >= 2.30.7");
  ++calls_[path];
  last_path_ = path;
  return path;
}

void GroupMemory::record_graph_buffer(const void *p, size_t bytes) {
  if (bytes > 0) graph_buffers_.emplace_back(p, bytes);
}

void GroupMemory::register_graph_buffers(DeviceComm *comm) {
  auto buffers = std::move(graph_buffers_);
  graph_buffers_.clear();
  std::sort(buffers.begin(), buffers.end());
  // Merge ranges that overlap or touch: each part of an allocation is registered once.
  std::vector<std::pair<const void *, size_t>> merged;
  for (const auto &[p, n] : buffers) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    if (!merged.empty()) {
      auto &last = merged.back();
      const auto b = reinterpret_cast<uintptr_t>(last.first);
      if (a <= b + last.second) {
        last.second = std::max(last.second, static_cast<size_t>(a + n - b));
        continue;
      }
    }
    merged.emplace_back(p, n);
  }
  size_t added = 0;
  for (const auto &[p, n] : merged) {
    bool covered = false;
    for (const Registration &r : registrations_) covered = covered || inside(p, n, r.base, r.bytes);
    for (const Block &b : blocks_) covered = covered || inside(p, n, b.base, b.bytes);
    if (covered) continue;
    try {
      register_buffer(const_cast<void *>(p), n, comm, true);
      ++added;
    } catch (const Error &e) {  // overlaps an earlier registration in part: left as it is
      log_.info(e.what());
    }
  }
  if (added > 0) log_.info(group_, ": pstate_graph_capture_end registered ", added, " captured buffer range(s)");
}

pstate_mem_info_t GroupMemory::query(const void *p) const {
  pstate_mem_info_t info = PSTATE_MEM_INFO_INIT;
  if (in_pool(p)) {
    const Block &reserve = blocks_[static_cast<size_t>(pool_)];
    const auto offset = static_cast<size_t>(static_cast<const char *>(p) - static_cast<const char *>(reserve.base));
    auto it = pieces_.upper_bound(offset);
    if (it != pieces_.begin() && offset < std::prev(it)->first + std::prev(it)->second) {
      --it;
      info.kind = PSTATE_MEM_POOL;
      info.base = static_cast<char *>(reserve.base) + it->first;
      info.size = it->second;
    } else {
      info.kind = PSTATE_MEM_GROUP;  // the reserve, outside any piece
      info.base = reserve.base;
      info.size = reserve.bytes;
    }
  } else if (const Block *b = find_block(p, true)) {
    info.kind = PSTATE_MEM_GROUP;
    info.base = b->base;
    info.size = b->bytes;
  } else if (const Registration *r = find_registration(p)) {
    info.kind = PSTATE_MEM_REGISTERED;
    info.base = r->base;
    info.size = r->bytes;
  }
  info.symmetric = symmetric_at(p, 1) ? 1 : 0;
  info.registered = registered_at(p, 1) ? 1 : 0;
  return info;
}

pstate_mem_stats_t GroupMemory::stats() const {
  pstate_mem_stats_t s = PSTATE_MEM_STATS_INIT;
  s.symmetric_calls = calls_[PSTATE_MEM_PATH_SYMMETRIC];
  s.registered_calls = calls_[PSTATE_MEM_PATH_REGISTERED];
  s.plain_calls = calls_[PSTATE_MEM_PATH_PLAIN];
  for (const Block &b : blocks_) {
    s.windows += b.window != nullptr ? 1 : 0;
    s.allocated += b.bytes;
  }
  for (const Registration &r : registrations_) s.registrations += r.handle != nullptr ? 1 : 0;
  if (pool_ >= 0) s.pool_reserved = blocks_[static_cast<size_t>(pool_)].bytes;
  s.pool_used = pool_used_;
  s.symmetric_available = fallback_.empty() && (blocks_.empty() || s.windows > 0) ? 1 : 0;
  s.last_path = last_path_;
  s.nccl_version = device_.nccl_version();
  return s;
}

}  // namespace pstate
