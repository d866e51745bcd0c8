// shm_p2p.hpp — point-to-point messages between ranks of one host: a byte ring per direction of
// each pair of ranks in a shared segment, made when the pair first exchanges a message.
//
// Why: over UCX's shared-memory transports a send/receive pair of a few bytes costs 1.4-3 us here
// against 0.5 us for Open MPI's vader (BENCHMARKS.md, sendrecv ring), most of it in the tag
// matching, request objects and progress of a general transport. Between two processes of one
// host a message needs none of that: the sender copies it into a ring the receiver reads, in
// order, and pstate's point-to-point is exactly "the k-th send from a to b is b's k-th receive
// from a" (no tags, no wildcards), so a FIFO per direction is the whole matching.
//
// The pair segment. Group ranks a < b share one segment named <base>-<a>-<b>: a header, then two
// rings (a -> b, b -> a). It is made by whichever of the two first needs it, without waiting for
// the other (a send must not block on the receiver's arrival, or a ring of ranks that all send
// first would deadlock): shm_open(O_CREAT | O_EXCL), ftruncate (fresh pages are zero: the rings
// start empty). The other opens the existing name, waits until it has its full size, maps it and
// unlinks the name, so nothing is left in /dev/shm once both are attached. A rank that tears
// down the engine removes the names of its pairs too, except one it made that its live peer has
// not opened yet (the messages in it are still to be received: the peer opens it, or removes the
// name at its own teardown). So a name outlives both ranks only if the peer is killed before it
// ever looked at the pair and its maker is killed too.
//
// A ring is capacity bytes of data, a tail the writer advances and a head the reader advances
// (each on its own cache line, written only by its owner, release; read by the other, acquire).
// A message is a 16-byte header (payload bytes with, in bits 48..53, what the message is: its kind
// and dtype, common/p2p_message_kind.hpp; then a word of the per-direction sequence number and a magic
// word) followed by its payload padded to 16 bytes, wrapping at the end of the ring.
// The reader polls the header's second word where the next message will start (the writer
// zeroed it before publishing the previous message, and stores it last): a small message is
// written payload first, header word last, so its arrival is one look at one cache line (the
// ring-step time of Open MPI's fast boxes; a separate tail would be a second miss).
// A larger message publishes its header first and its payload through the tail every
// kPublishBytes, so the reader copies out the first chunk while the next is being copied in
// (two copies, pipelined; a message of any size passes through a ring of any size). A receive of
// a different size, kind or dtype than the message's is PSTATE_ERR_MISMATCH, naming both sides
// (nothing of it is copied); the pair's stream is then out of step, so the pair is
// broken (every later operation with that peer fails; the reader's `broken` flag tells the
// writer) and the caller fails its context.
//
// By reference (messages of cma_bytes or more, 32 KiB by default: from there one
// process_vm_readv beats two pipelined copies here, 4.1-4.7 against 3.8-7.8 us a ring step):
// the header grows to 32 bytes with the sender's pid and buffer address and no payload follows;
// the receiver copies the payload once, straight from the sender's memory (process_vm_readv,
// Open MPI vader's single-copy mechanism), then raises its `refs_read` count, which completes
// the send. Where the kernel refuses (a ptrace policy, a seccomp filter: EPERM, ENOSYS) the receiver records the
// refusal instead, the sender then writes the payload into the ring behind the header, and the
// pair never offers a reference again. Peers that are threads of this process always use the
// ring (see ShmP2pOptions::same_process).
//
// Progress: nothing moves by itself. Every post, test and wait moves what can move on every
// pair (writes what fits, reads what arrived, for the operations at the head of each queue), and
// the group calls progress() from the periodic check of its other waits (every liveness interval
// once a wait sleeps), so a large send that waits for ring space still moves while its rank waits
// in a collective of the same group. A message sent by reference needs no progress from its
// sender at all: the receiver copies it and acknowledges it in the ring. Waits spin, then yield,
// then sleep in short naps, calling the liveness check (PSTATE_ERR_PEER_LOST for a dead peer,
// PSTATE_ERR_INTERRUPTED) every liveness interval, and end with PSTATE_ERR_TIMEOUT at the deadline.
//
// Threads: one thread drives an engine at a time (the context's rule); engines of different ranks
// (threads of one process as ranks, each with its own) only share the segment.
#pragma once

#include "common/deadline.hpp"

#include <pstate/pstate.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pstate::shm {

struct ShmP2pOptions {
  std::string label = "shm p2p";    // names the group in every message ("pp:0")
  size_t ring_bytes = 512 * 1024;   // data bytes of each direction's ring (both ranks must agree)
  size_t cma_bytes = 32 * 1024;     // messages this large go by reference (one copy); 0: never
  std::function<void(int, int)> on_cma_refused;  // (peer, errno) the first time a reference is refused
  std::function<void()> liveness;   // throws PEER_LOST / INTERRUPTED; may be empty
  std::function<bool(int)> peer_gone;  // true when group rank r's process has exited; may be empty
  // true when group rank r is a thread of this process (ranks as threads): nothing goes by
  // reference to it (the ring's copies stay in the shared segment, which each rank maps itself;
  // a reference would have the peer read this thread's heap, synchronized only through the
  // segment's atomics at another address, which ThreadSanitizer cannot pair). May be empty.
  std::function<bool(int)> same_process;
  int liveness_interval_ms = 20;
  bool spin = true;                 // false when ranks outnumber CPUs: yield at once
  std::vector<int> global_ranks;    // the world rank of each group rank, for messages (may be empty)
};

class ShmP2p {
 public:
  using OpId = uint64_t;

  // base: the group's unique shared-memory prefix ("/pstate-<job>-<group>-<first rank>-p2p").
  ShmP2p(std::string base, int rank, int size, ShmP2pOptions options);
  ~ShmP2p();  // unmaps every pair and unlinks their names; pending operations are dropped
  ShmP2p(const ShmP2p &) = delete;
  ShmP2p &operator=(const ShmP2p &) = delete;

  // Queue a send / receive of bytes with group rank peer (not this rank); moves what it can at
  // once. The buffer belongs to the engine until the operation completed (test/wait) or was
  // cancelled. Attaching to the pair segment may throw (PSTATE_ERR_TRANSPORT: shm_open failed).
  // what: the message's kind and dtype (common/p2p_message_kind.hpp); a receive takes only a message of
  // its own size and what.
  OpId post_send(int peer, const void *buf, size_t bytes, const Deadline &deadline, uint32_t what = 0);
  OpId post_recv(int peer, void *buf, size_t bytes, const Deadline &deadline, uint32_t what = 0);
  // Moves what it can; true (and the operation forgotten) once it completed. A failed operation
  // throws its error (and is forgotten).
  bool test(OpId id);
  // Until every listed operation completed: the first failure throws (the others stay queued).
  void wait(const OpId *ids, size_t n, const Deadline &deadline, const char *what);
  void wait(OpId id, const Deadline &deadline, const char *what) { wait(&id, 1, deadline, what); }
  // Forgets a pending operation: its buffer is no longer touched. A send cancelled half-written
  // leaves its pair's stream out of step (used at abort/finalize only).
  void cancel(OpId id) noexcept;
  // Moves whatever can move on every pair, without blocking. Failures are kept in the operations.
  void progress() noexcept;
  bool pending() const { return live_ != 0; }
  // One line for PSTATE_DEBUG=INFO.
  std::string describe() const;
  // For a rank that tears down a group without ever having made its engine: removes the names of
  // the pairs of rank (its peers may have made them for messages it never received).
  static void remove_pair_names(const std::string &base, int rank, int size) noexcept;

  struct Ring;    // in-segment layout (shm_p2p.cpp)
  struct Header;

 private:
  struct Op {
    bool send = false;
    int peer = -1;
    uint8_t *buf = nullptr;
    size_t bytes = 0;
    uint32_t what = 0;         // kind and dtype (common/p2p_message_kind.hpp)
    size_t moved = 0;          // payload bytes written / read so far
    size_t header_len = 0;     // 16 (by value) or 32 (by reference), once written / read whole; 0: not yet
    uint8_t header[32] = {};   // the header being written / read
    bool by_ref = false;       // offered by reference: the reader copies from this process
    uint64_t ref_index = 0;    // sender: its number among the pair's references (1, 2, ...)
    bool done = false;
    pstate_status_t status = PSTATE_OK;
    std::string message;
  };
  struct Pair {
    bool created = false;     // this rank made the segment (see ~ShmP2p)
    uint8_t *base = nullptr;  // mapped segment
    size_t mapped = 0;
    Ring *out = nullptr;      // the ring this rank writes
    Ring *in = nullptr;       // the ring this rank reads
    uint8_t *out_data = nullptr;
    uint8_t *in_data = nullptr;
    uint64_t out_head_seen = 0;  // the reader's head as last loaded (space check without a miss)
    uint64_t in_tail_seen = 0;   // the writer's tail as last loaded
    uint32_t sent = 0, received = 0;  // messages completed per direction (header sequence numbers)
    uint64_t refs_sent = 0, refs_received = 0;  // messages offered / taken by reference
    bool cma_off = false;             // a reference was refused (or the peer is a thread of this
                                      // process): everything by value
    std::deque<OpId> sends, recvs;    // queued operations, oldest first
    bool broken = false;
    std::string broken_why;
  };

  Pair &pair(int peer, const Deadline &deadline);
  std::string pair_name(int peer) const;
  OpId post(bool send, int peer, uint8_t *buf, size_t bytes, const Deadline &deadline, uint32_t what);
  bool move_send(Pair &p, Op &op);  // true when op finished
  bool move_recv(Pair &p, Op &op);
  void progress_pair(Pair &p) noexcept;
  void fail_pair(Pair &p, pstate_status_t status, const std::string &why) noexcept;
  [[noreturn]] void throw_failed(OpId id);
  int global_rank(int group_rank) const;

  std::string base_;
  int rank_;
  int size_;
  ShmP2pOptions options_;
  size_t segment_bytes_ = 0;
  std::vector<std::unique_ptr<Pair>> pairs_;  // by peer; null until first used
  // Operations live in slots reused through a free list (no allocation per message once warm); an
  // OpId is (generation << 32 | slot + 1), so a stale id never finds a reused slot.
  struct Slot {
    uint32_t generation = 0;
    bool used = false;
    Op op;
  };
  Op *find(OpId id);
  Op &get(OpId id) { return *find(id); }
  OpId allocate();
  void release(OpId id);
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  size_t live_ = 0;
};

}  // namespace pstate::shm
