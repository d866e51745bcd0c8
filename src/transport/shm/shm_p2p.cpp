// shm_p2p.cpp — the pair segments, the byte rings and the operation queues of ShmP2p (the design
// is in shm_p2p.hpp).
#include "transport/shm/shm_p2p.hpp"

#include "common/p2p_message_kind.hpp"

#include "common/arith.hpp"
#include "common/dev_shm.hpp"
#include "common/error.hpp"
#include "common/host_cpus.hpp"
#include "transport/shm/shm_wait.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace pstate::shm {

namespace {

constexpr uint32_t kSegmentMagic = 0x70327032;  // "p2p2" (three-line rings)
constexpr uint32_t kMessageMagic = 0x6d736731;  // "msg1": the payload follows in the ring
constexpr uint32_t kWholeMagic = 0x6d736777;    // "msgw": the payload is behind the header already
constexpr uint32_t kRefMagic = 0x72656631;      // "ref1": pid and address follow; the reader copies
constexpr size_t kHeaderBytes = 16;             // payload bytes, sequence number, magic
constexpr size_t kRefHeaderBytes = 32;          // + the sender's pid and buffer address
// The header's first word: payload bytes (< 2^48: buffers hold at most 2^47) and, above them,
// what the message is (common/p2p_message_kind.hpp).
constexpr int kWhatShift = 48;
constexpr uint64_t kSizeMask = (uint64_t{1} << kWhatShift) - 1;
// The stream. Every message starts on a kSlot boundary: its header (16 bytes, or 32 by
// reference), then its payload padded to a multiple of kSlot. The header's second word (the
// per-direction sequence number and the magic word, never 0) is stored last, with release, and
// the reader polls that word in place: a message whose padded payload fits in kPublishBytes is
// written whole, payload first, so the reader finds header and payload with one look, usually in
// one cache line, where a separate tail costs it a second miss. Before any message is published
// the writer zeroes the slot after it (the space check keeps that slot free), so the word the
// reader polls next is 0 until the next message is published there, never an older lap's bytes.
// Larger messages publish their header first and their payload in chunks through the tail, as
// does a refused reference (the payload follows the 32-byte header by value).
constexpr size_t kSlot = 16;
// The writer publishes its tail (and the reader its head) at least every this many bytes, so a
// large message is copied out while the rest is copied in.
constexpr size_t kPublishBytes = 16 * 1024;
constexpr int64_t kSpinNs = 50 * 1000;     // spin this long before yielding (a core each)
constexpr int64_t kYieldNs = 1000 * 1000;  // then yield this long before napping
constexpr auto kNap = std::chrono::microseconds(50);


// Copies n bytes into / out of a ring of capacity c at stream position pos (wrapping).
void write_wrap(uint8_t *data, size_t c, uint64_t pos, const uint8_t *src, size_t n) {
  if (n == 0) return;  // an empty message's buffer may be null
  const size_t at = static_cast<size_t>(pos % c), first = std::min(n, c - at);
  std::memcpy(data + at, src, first);
  if (first < n) std::memcpy(data, src + first, n - first);
}

void zero_slot(uint8_t *data, size_t c, uint64_t pos) { std::memset(data + pos % c, 0, kSlot); }

void read_wrap(const uint8_t *data, size_t c, uint64_t pos, uint8_t *dst, size_t n) {
  if (n == 0) return;
  const size_t at = static_cast<size_t>(pos % c), first = std::min(n, c - at);
  std::memcpy(dst, data + at, first);
  if (first < n) std::memcpy(dst + first, data, n - first);
}

}  // namespace

struct ShmP2p::Header {
  std::atomic<uint32_t> magic;     // stored last by the rank that made the segment
  uint32_t ring_bytes;
  std::atomic<uint32_t> attached;  // 1 once the other rank mapped it (and unlinked the name)
  uint8_t pad[52];
};

// Three lines: the writer's tail, the reader's head, and the reader's rarer words. The head is
// stored on every receive and the writer loads it only when its cached copy says the ring is
// full; what the writer looks at on every send (broken) has a line of its own, which stays
// shared in both caches, so a send of a few bytes misses on nothing of the reader's.
struct ShmP2p::Ring {
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever written (the writer's line)
  uint8_t pad0[56];
  alignas(64) std::atomic<uint64_t> head;  // bytes ever read (the reader's)
  uint8_t pad1[56];
  alignas(64) std::atomic<uint64_t> refs_read;  // messages offered by reference that the reader is done with
  std::atomic<uint64_t> ref_refused;       // the index of the one it could not read (0: none)
  std::atomic<uint32_t> broken;            // 1: the reader found a size mismatch
  uint8_t pad2[36];
};

static_assert(sizeof(ShmP2p::Header) == 64 && sizeof(ShmP2p::Ring) == 192, "pair segment layout");

ShmP2p::ShmP2p(std::string base, int rank, int size, ShmP2pOptions options)
    : base_(std::move(base)), rank_(rank), size_(size), options_(std::move(options)) {
  options_.ring_bytes = round_up(std::max<size_t>(options_.ring_bytes, 4096), 64);
  options_.spin = options_.spin && spinning_allowed();  // PSTATE_SPIN=0: a CPU shared with another job
  segment_bytes_ = sizeof(Header) + 2 * sizeof(Ring) + 2 * options_.ring_bytes;
  pairs_.resize(static_cast<size_t>(size_));
}

// Names: a pair this rank made that its peer has not opened yet keeps its name while the peer
// lives (what was sent is still to be received: the peer opens it, or removes it when it tears
// down); every other pair's name is removed (ENOENT when the opener already did), including one
// the peer made for this rank that this rank never opened.
ShmP2p::~ShmP2p() {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const Pair *p = pairs_[static_cast<size_t>(peer)].get();
    const bool waiting_for_peer = p != nullptr && p->created &&
                                  reinterpret_cast<const Header *>(p->base)->attached.load(std::memory_order_acquire) == 0;
    if (!waiting_for_peer || (options_.peer_gone && options_.peer_gone(peer))) ::shm_unlink(pair_name(peer).c_str());
    if (p != nullptr) ::munmap(p->base, p->mapped);
  }
}

static std::string name_of_pair(const std::string &base, int a, int b) {
  return cat(base, "-", std::min(a, b), "-", std::max(a, b));
}

std::string ShmP2p::pair_name(int peer) const { return name_of_pair(base_, rank_, peer); }

void ShmP2p::remove_pair_names(const std::string &base, int rank, int size) noexcept {
  try {
    for (int peer = 0; peer < size; ++peer)
      if (peer != rank) ::shm_unlink(name_of_pair(base, rank, peer).c_str());
  } catch (...) {  // no memory for a name: nothing to remove with it
  }
}

int ShmP2p::global_rank(int group_rank) const {
  const auto i = static_cast<size_t>(group_rank);
  return i < options_.global_ranks.size() ? options_.global_ranks[i] : group_rank;
}

std::string ShmP2p::describe() const {
  int attached = 0;
  for (const auto &p : pairs_) attached += p != nullptr;
  return cat(options_.label, ": point-to-point in shared memory, ", options_.ring_bytes / 1024,
             " KiB ring per direction, ", attached, " of ", size_ - 1, " pairs attached");
}

// Attaches the pair segment shared with peer (see shm_p2p.hpp, "The pair segment").
ShmP2p::Pair &ShmP2p::pair(int peer, const Deadline &deadline) {
  std::unique_ptr<Pair> &slot = pairs_[static_cast<size_t>(peer)];
  if (slot) return *slot;
  const std::string name = pair_name(peer);
  int fd = -1;
  bool created = false;
  for (int attempt = 0; fd < 0 && attempt < 8; ++attempt) {
    fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      created = true;
    } else if (errno == EEXIST) {
      fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);  // ENOENT: gone meanwhile, try again
      if (fd < 0 && errno != ENOENT) break;
    } else {
      break;
    }
  }
  if (fd < 0)
    throw_error(PSTATE_ERR_TRANSPORT, options_.label, " rank ", rank_, ": point-to-point with group rank ", peer,
                ": shm_open(", name, ") failed: ", std::strerror(errno),
                " (is /dev/shm mounted and writable? PSTATE_SHM=0 sends over UCX instead)");
  auto close_fd = [&] { ::close(fd); };
  if (created) {
    // Every page backed now (posix_fallocate): a /dev/shm too small fails here, with the cause
    // named, not with a SIGBUS at the first write to a page it cannot back.
    int err = ::ftruncate(fd, static_cast<off_t>(segment_bytes_)) != 0 ? errno : 0;
    if (err == 0) err = ::posix_fallocate(fd, 0, static_cast<off_t>(segment_bytes_));
    if (err != 0) {
      close_fd();
      ::shm_unlink(name.c_str());
      if (err == ENOSPC || err == ENOMEM)
        throw_error(PSTATE_ERR_NO_MEMORY, options_.label, " rank ", rank_, ": point-to-point with group rank ", peer,
                    ": shared segment ", name, ": ",
                    dev_shm_advice(dev_shm_space(), cat("this pair needs ", human_bytes(segment_bytes_))));
      throw_error(PSTATE_ERR_TRANSPORT, options_.label, " rank ", rank_, ": point-to-point with group rank ", peer,
                  ": sizing ", name, " to ", segment_bytes_, " bytes failed: ", std::strerror(err),
                  " (PSTATE_SHM=0 sends over UCX instead)");
    }
  } else {  // the maker may not have sized it yet
    struct stat st {};
    auto last_check = std::chrono::steady_clock::now();
    while (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) < segment_bytes_) {
      if (deadline.expired()) {
        close_fd();
        throw_error(PSTATE_ERR_TIMEOUT, options_.label, " rank ", rank_, ": ", name, " made by group rank ", peer,
                    " was never sized (it stopped while making it?)");
      }
      if (options_.liveness && std::chrono::steady_clock::now() - last_check > std::chrono::milliseconds(100)) {
        last_check = std::chrono::steady_clock::now();
        options_.liveness();
      }
      sched_yield();
    }
  }
  void *m = ::mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_err = errno;
  close_fd();
  if (m == MAP_FAILED) {
    if (created) ::shm_unlink(name.c_str());
    throw_error(PSTATE_ERR_TRANSPORT, options_.label, " rank ", rank_, ": mapping ", name, " failed: ",
                std::strerror(map_err));
  }
  auto p = std::make_unique<Pair>();
  p->created = created;
  p->cma_off = options_.same_process && options_.same_process(peer);
  p->base = static_cast<uint8_t *>(m);
  p->mapped = segment_bytes_;
  auto *header = reinterpret_cast<Header *>(p->base);
  if (created) {
    header->ring_bytes = static_cast<uint32_t>(options_.ring_bytes);
    header->magic.store(kSegmentMagic, std::memory_order_release);
  } else {
    while (header->magic.load(std::memory_order_acquire) != kSegmentMagic) {
      if (deadline.expired()) {
        ::munmap(m, segment_bytes_);
        throw_error(PSTATE_ERR_TIMEOUT, options_.label, " rank ", rank_, ": ", name, " made by group rank ", peer,
                    " was never initialized");
      }
      sched_yield();
    }
    ::shm_unlink(name.c_str());  // both attached: the name is no longer needed
    header->attached.store(1, std::memory_order_release);
    if (header->ring_bytes != options_.ring_bytes) {
      ::munmap(m, segment_bytes_);
      throw_error(PSTATE_ERR_MISMATCH, options_.label, " rank ", rank_, ": group rank ", peer, " uses rings of ",
                  header->ring_bytes, " bytes, this rank ", options_.ring_bytes, " (same library on every rank?)");
    }
  }
  auto *rings = reinterpret_cast<Ring *>(p->base + sizeof(Header));
  uint8_t *data = p->base + sizeof(Header) + 2 * sizeof(Ring);
  const int out = rank_ < peer ? 0 : 1;  // ring 0: lower rank -> higher rank
  p->out = &rings[out];
  p->in = &rings[1 - out];
  p->out_data = data + static_cast<size_t>(out) * options_.ring_bytes;
  p->in_data = data + static_cast<size_t>(1 - out) * options_.ring_bytes;
  slot = std::move(p);
  return *slot;
}

ShmP2p::OpId ShmP2p::post_send(int peer, const void *buf, size_t bytes, const Deadline &deadline, uint32_t what) {
  return post(true, peer, static_cast<uint8_t *>(const_cast<void *>(buf)), bytes, deadline, what);
}

ShmP2p::OpId ShmP2p::post_recv(int peer, void *buf, size_t bytes, const Deadline &deadline, uint32_t what) {
  return post(false, peer, static_cast<uint8_t *>(buf), bytes, deadline, what);
}

ShmP2p::OpId ShmP2p::post(bool send, int peer, uint8_t *buf, size_t bytes, const Deadline &deadline,
                          uint32_t what) {
  Pair &p = pair(peer, deadline);
  const OpId id = allocate();
  Op &op = get(id);
  op.send = send;
  op.peer = peer;
  op.buf = buf;
  op.bytes = bytes;
  op.what = what & kP2PWhatMask;
  if (p.broken) {
    op.done = true;
    op.status = PSTATE_ERR_ABORTED;
    op.message = p.broken_why;
    return id;
  }
  (send ? p.sends : p.recvs).push_back(id);
  progress_pair(p);
  return id;
}

// The sender's side of op (the oldest send of the pair); true once the buffer is free again:
// by value, when all of it is in the ring; by reference, when the reader has copied it (or
// refused to: then it follows by value). The stream layout and the publication order are in
// the comment above kSlot.
bool ShmP2p::move_send(Pair &p, Op &op) {
  const size_t c = options_.ring_bytes;
  const uint64_t start = p.out->tail.load(std::memory_order_relaxed);
  uint64_t tail = start;
  // Free bytes after the tail, keeping the slot behind it free (the next header's, zeroed).
  auto space = [&](size_t want) {
    if (c - kSlot - (tail - p.out_head_seen) < want) p.out_head_seen = p.out->head.load(std::memory_order_acquire);
    return c - kSlot - static_cast<size_t>(tail - p.out_head_seen);
  };
  if (p.out->broken.load(std::memory_order_acquire) != 0) {  // the reader found a size mismatch
    fail_pair(p, PSTATE_ERR_MISMATCH,
              cat(options_.label, ": rank ", global_rank(op.peer), " (group rank ", op.peer,
                  ") received a message from rank ", global_rank(rank_),
                  " with a size, kind or dtype other than its receive's (its error names both); the pair's stream is "
                  "out of step: abort the context"));
    return false;
  }
  const size_t padded = round_up(op.bytes, kSlot);
  if (op.header_len == 0) {  // not started: the header (and a whole small message) in one step
    op.by_ref = options_.cma_bytes != 0 && op.bytes >= options_.cma_bytes && !p.cma_off &&
                p.out->ref_refused.load(std::memory_order_relaxed) == 0;
    const size_t hlen = op.by_ref ? kRefHeaderBytes : kHeaderBytes;
    const bool whole = !op.by_ref && padded <= kPublishBytes && hlen + padded <= c - kSlot;
    const size_t need = hlen + (whole ? padded : 0);
    if (space(need) < need) return false;
    uint8_t *h = p.out_data + tail % c;  // a slot: never wraps
    const uint64_t size_word = op.bytes | uint64_t{op.what} << kWhatShift;
    std::memcpy(h, &size_word, 8);
    if (op.by_ref) {
      const uint64_t pid = static_cast<uint64_t>(::getpid()), addr = reinterpret_cast<uintptr_t>(op.buf);
      std::memcpy(h + 16, &pid, 8);
      std::memcpy(h + 24, &addr, 8);
    }
    if (whole) write_wrap(p.out_data, c, tail + hlen, op.buf, op.bytes);
    op.header_len = hlen;
    tail += need;
    if (whole) op.moved = op.bytes;
    if (whole || op.by_ref) zero_slot(p.out_data, c, tail);  // where the reader looks next
    const uint32_t magic = whole ? kWholeMagic : op.by_ref ? kRefMagic : kMessageMagic;
    __atomic_store_n(reinterpret_cast<uint64_t *>(h + 8), static_cast<uint64_t>(magic) << 32 | p.sent,
                     __ATOMIC_RELEASE);
    p.out->tail.store(tail, std::memory_order_release);
    if (whole) {
      ++p.sent;
      return true;
    }
  }
  if (op.by_ref) {
    if (op.ref_index == 0) op.ref_index = ++p.refs_sent;
    if (p.out->refs_read.load(std::memory_order_acquire) < op.ref_index) return false;  // not copied yet
    if (p.out->ref_refused.load(std::memory_order_acquire) != op.ref_index) {
      ++p.sent;
      return true;
    }
    op.by_ref = false;  // the reader cannot read this process's memory: the payload follows by value
    p.cma_off = true;
  }
  while (op.moved < op.bytes) {  // by value, header first: chunks published as they land
    const size_t want = std::min(op.bytes - op.moved, kPublishBytes);
    const size_t n = std::min(want, space(want));
    if (n == 0) break;
    write_wrap(p.out_data, c, tail, op.buf + op.moved, n);
    tail += n;
    op.moved += n;
    if (op.moved < op.bytes) p.out->tail.store(tail, std::memory_order_release);  // the reader starts
  }
  const size_t pad = padded - op.bytes;
  if (op.moved < op.bytes || space(pad) < pad) {
    if (tail != start) p.out->tail.store(tail, std::memory_order_release);
    return false;
  }
  tail += pad;  // the next header's slot is aligned; then zeroed before the reader may get there
  zero_slot(p.out_data, c, tail);
  p.out->tail.store(tail, std::memory_order_release);
  ++p.sent;
  return true;
}

// Copies bytes at addr in process pid into dst (one copy: process_vm_readv). false with *err set
// when the kernel refuses.
static bool read_remote(uint64_t pid, uint64_t addr, uint8_t *dst, size_t bytes, int *err) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{dst + done, bytes - done};
    iovec remote{reinterpret_cast<void *>(static_cast<uintptr_t>(addr + done)), bytes - done};
    const ssize_t n = ::process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *err = n < 0 ? errno : EIO;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

// The receiver's side of op (the oldest receive of the pair); true when all of it is in op.buf.
// A message of another size fails the pair (MISMATCH, and the ring's broken flag tells the
// sender) and returns false.
bool ShmP2p::move_recv(Pair &p, Op &op) {
  const size_t c = options_.ring_bytes;
  const uint64_t start = p.in->head.load(std::memory_order_relaxed);
  uint64_t head = start;
  // Bytes published after the head (the writer's tail; a header seen in its slot may be ahead of
  // the tail that published it).
  auto avail = [&](size_t want) -> size_t {
    if (p.in_tail_seen < head + want) p.in_tail_seen = p.in->tail.load(std::memory_order_acquire);
    return p.in_tail_seen > head ? static_cast<size_t>(p.in_tail_seen - head) : 0;
  };
  if (op.header_len == 0) {  // the header's slot: zero until the writer published the message
    const uint8_t *h = p.in_data + head % c;
    const uint64_t word = __atomic_load_n(reinterpret_cast<const uint64_t *>(h + 8), __ATOMIC_ACQUIRE);
    if (word == 0) return false;
    const auto seq = static_cast<uint32_t>(word), magic = static_cast<uint32_t>(word >> 32);
    uint64_t size_word = 0;
    std::memcpy(&size_word, h, 8);
    const uint64_t bytes = size_word & kSizeMask;
    const auto what = static_cast<uint32_t>(size_word >> kWhatShift) & kP2PWhatMask;
    if ((magic != kMessageMagic && magic != kWholeMagic && magic != kRefMagic) || seq != p.received) {
      fail_pair(p, PSTATE_ERR_TRANSPORT,
                cat(options_.label, ": the stream from rank ", global_rank(op.peer), " (group rank ", op.peer,
                    ") to rank ", global_rank(rank_), " is corrupt (message #", p.received, ": magic ", magic,
                    ", sequence ", seq, "); the context must be aborted"));
      return false;
    }
    if (bytes != op.bytes || what != op.what) {
      p.in->broken.store(1, std::memory_order_release);
      fail_pair(p, PSTATE_ERR_MISMATCH,
                cat(options_.label, ": rank ", global_rank(op.peer), " (group rank ", op.peer, ") sent its message #",
                    seq, " with ", describe_p2p_what(P2PStream::kTensors, what), " (", bytes, " bytes) to rank ",
                    global_rank(rank_), " (group rank ", rank_, "), which expected exactly ", op.bytes,
                    " bytes in ", describe_p2p_what(P2PStream::kTensors, op.what, /*receiving=*/true),
                    ": a send and its receive must agree on kind, dtype and count; nothing of it was copied, "
                    "and the pair's stream is now out of step, so the context is failed on both sides"));
      return false;
    }
    if (magic == kWholeMagic) {  // the payload was in the ring before the header: one look
      read_wrap(p.in_data, c, head + kHeaderBytes, op.buf, op.bytes);
      head += kHeaderBytes + round_up(op.bytes, kSlot);
      p.in->head.store(head, std::memory_order_release);
      ++p.received;
      return true;
    }
    op.by_ref = magic == kRefMagic;
    op.header_len = op.by_ref ? kRefHeaderBytes : kHeaderBytes;
    std::memcpy(op.header, h, op.header_len);
    head += op.header_len;
  }
  if (op.by_ref) {
    p.in->head.store(head, std::memory_order_release);
    uint64_t pid = 0, addr = 0;
    std::memcpy(&pid, op.header + 16, 8);
    std::memcpy(&addr, op.header + 24, 8);
    const uint64_t index = ++p.refs_received;
    int err = 0;
    if (!p.cma_off && read_remote(pid, addr, op.buf, op.bytes, &err)) {
      p.in->refs_read.store(index, std::memory_order_release);
      ++p.received;
      return true;
    }
    // Refused (EPERM under a ptrace policy, ENOSYS, a seccomp filter): the sender sends the
    // payload by value after this, and offers nothing by reference to this rank again.
    if (!p.cma_off && options_.on_cma_refused) options_.on_cma_refused(op.peer, err);
    p.cma_off = true;
    p.in->ref_refused.store(index, std::memory_order_relaxed);
    p.in->refs_read.store(index, std::memory_order_release);
    op.by_ref = false;
    return move_recv(p, op);
  }
  while (op.moved < op.bytes) {  // header first: chunks as they are published
    const size_t want = std::min(op.bytes - op.moved, kPublishBytes);
    const size_t n = std::min(want, avail(want));
    if (n == 0) break;
    read_wrap(p.in_data, c, head, op.buf + op.moved, n);
    head += n;
    op.moved += n;
    p.in->head.store(head, std::memory_order_release);  // room for the writer
  }
  const size_t pad = round_up(op.bytes, kSlot) - op.bytes;
  if (op.moved < op.bytes || avail(pad) < pad) {
    if (head != start) p.in->head.store(head, std::memory_order_release);
    return false;
  }
  head += pad;
  p.in->head.store(head, std::memory_order_release);
  ++p.received;
  return true;
}

void ShmP2p::fail_pair(Pair &p, pstate_status_t status, const std::string &why) noexcept {
  p.broken = true;
  p.broken_why = why;
  for (auto *q : {&p.sends, &p.recvs}) {
    for (OpId id : *q) {
      Op *op = find(id);
      if (op == nullptr) continue;
      op->done = true;
      op->status = status;
      op->message = why;
    }
    q->clear();
  }
}

void ShmP2p::progress_pair(Pair &p) noexcept {
  while (!p.broken && !p.sends.empty()) {
    Op &op = get(p.sends.front());
    if (!move_send(p, op)) break;
    op.done = true;
    p.sends.pop_front();
  }
  while (!p.broken && !p.recvs.empty()) {
    Op &op = get(p.recvs.front());
    if (!move_recv(p, op)) break;
    op.done = true;
    p.recvs.pop_front();
  }
}

void ShmP2p::progress() noexcept {
  for (auto &p : pairs_)
    if (p && (!p->sends.empty() || !p->recvs.empty())) progress_pair(*p);
}

ShmP2p::Op *ShmP2p::find(OpId id) {
  const uint64_t index = (id & 0xffffffffu) - 1;
  if (index >= slots_.size()) return nullptr;
  Slot &s = slots_[index];
  return s.used && s.generation == static_cast<uint32_t>(id >> 32) ? &s.op : nullptr;
}

ShmP2p::OpId ShmP2p::allocate() {
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot &s = slots_[index];
  s.used = true;
  Op &op = s.op;  // reset field by field: no temporary Op (its header and string) per message
  op.moved = op.header_len = 0;
  op.by_ref = op.done = false;
  op.ref_index = 0;
  op.status = PSTATE_OK;
  op.message.clear();
  ++live_;
  return static_cast<OpId>(s.generation) << 32 | (static_cast<OpId>(index) + 1);
}

void ShmP2p::release(OpId id) {
  if (find(id) == nullptr) return;
  const auto index = static_cast<uint32_t>((id & 0xffffffffu) - 1);
  Slot &s = slots_[index];
  s.used = false;
  ++s.generation;
  s.op.message.clear();
  free_.push_back(index);
  --live_;
}

void ShmP2p::throw_failed(OpId id) {
  Op &op = get(id);
  const pstate_status_t status = op.status;
  std::string message = std::move(op.message);
  release(id);
  throw Error(status, message);
}

bool ShmP2p::test(OpId id) {
  progress();
  Op *op = find(id);
  if (op == nullptr)
    throw_error(PSTATE_ERR_INTERNAL, options_.label, ": point-to-point operation ", id, " is not pending");
  if (!op->done) return false;
  if (op->status != PSTATE_OK) throw_failed(id);
  release(id);
  return true;
}

void ShmP2p::wait(const OpId *ids, size_t n, const Deadline &deadline, const char *what) {
  // Done when every listed operation is done; the first failed one throws.
  auto all_done = [&] {
    bool all = true;
    for (size_t i = 0; i < n; ++i) {
      const Op *op = find(ids[i]);
      if (op == nullptr) continue;  // already collected
      if (op->done && op->status != PSTATE_OK) throw_failed(ids[i]);
      all = all && op->done;
    }
    return all;
  };
  auto collect = [&] {
    for (size_t i = 0; i < n; ++i) release(ids[i]);
  };
  progress();
  if (all_done()) return collect();  // the common case: no clock read at all
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto last_check = t0;
  for (uint64_t round = 1;; ++round) {
    progress();
    if (all_done()) break;
    if (options_.spin && round % 64 != 0) {  // spinning: look at the clock every 64 rounds
      cpu_relax();
      continue;
    }
    const auto now = Clock::now();
    const int64_t waited_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - t0).count();
    if (now - last_check >= std::chrono::milliseconds(options_.liveness_interval_ms)) {
      last_check = now;
      if (options_.liveness) options_.liveness();
    }
    if (deadline.expired()) {
      if (options_.liveness) options_.liveness();  // a dead peer is PEER_LOST, not TIMEOUT
      progress();
      if (all_done()) break;
      std::string stuck;
      for (size_t i = 0; i < n && stuck.empty(); ++i) {
        const Op *found = find(ids[i]);
        if (found == nullptr || found->done) continue;
        const Op &op = *found;
        const bool started = op.header_len != 0;
        stuck = op.send ? cat("its send of ", op.bytes, " bytes to rank ", global_rank(op.peer), " (group rank ",
                              op.peer, ") ",
                              op.by_ref ? std::string("was offered by reference and not copied yet")
                                        : cat("has ", op.moved, " in the ring (the receiver has not read the rest)"))
                        : cat("its receive of ", op.bytes, " bytes from rank ", global_rank(op.peer), " (group rank ",
                              op.peer, ") has ", started ? op.moved : 0,
                              started ? " of them" : " (no message has arrived)");
      }
      throw_error(PSTATE_ERR_TIMEOUT, options_.label, " rank ", global_rank(rank_), ": ", what, ": timed out after ",
                  std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(), " ms: ", stuck,
                  "; is the peer calling the matching operation?");
    }
    if (options_.spin && waited_ns < kSpinNs)
      cpu_relax();
    else if (waited_ns < (options_.spin ? kSpinNs : 0) + kYieldNs)
      sched_yield();
    else
      std::this_thread::sleep_for(kNap);
  }
  collect();
}

void ShmP2p::cancel(OpId id) noexcept {
  Op *found = find(id);
  if (found == nullptr) return;
  const Op &op = *found;
  if (!op.done && op.peer >= 0 && pairs_[static_cast<size_t>(op.peer)]) {
    Pair &p = *pairs_[static_cast<size_t>(op.peer)];
    auto &q = op.send ? p.sends : p.recvs;
    q.erase(std::remove(q.begin(), q.end(), id), q.end());
    if (op.header_len != 0)  // half moved: the stream is out of step
      fail_pair(p, PSTATE_ERR_ABORTED,
                cat(options_.label, ": a point-to-point operation with group rank ", op.peer,
                    " was cancelled half-moved (pstate_finalize or pstate_abort)"));
  }
  release(id);
}

}  // namespace pstate::shm
