// host_comm.hpp — the seam between a CPU group and the way it moves bytes: one interface for what
// a group needs of a host transport, in the shape of NCCL's `struct ncclTransport` and UCC's
// `ucc_tl_iface_t`.
//
// A group (src/group/group.hpp) holds one HostComm, chosen once when the group is made:
//   - UcxComm (transport/ucx/ucx_comm.hpp): a Channel over UCX and the algorithm selector of
//     src/coll/, for any ranks on any hosts;
//   - ShmComm (transport/shm/shm_comm.hpp): every rank on this host; today's shared-memory
//     segment (ShmGroup), pair rings (ShmP2p) and message queue, and a UcxComm of the same ranks
//     for what shared memory does not carry (objects, gather, all_to_all, the agreement exchange);
//   - a composed, host-aware communicator (shared memory inside each host, UCX between one leader
//     per host) implements the same interface over the two (docs/design.md, "a composed
//     communicator").
//
// What a call *is* stays in the group, common to every communicator: its number (the sequence
// that makes its tag base), the agreement (what ranks compare, the fold of a small call's data into
// the exchange, refusals, the mismatch texts), its flight-recorder entry, and what a failure does
// to the context. What the group asks of the communicator is how bytes move: the collectives,
// point-to-point and requests, objects, the exchange of agreement records, and facts fixed at
// construction: the path its calls take (for the recorder and the log), whether its collectives
// carry the agreement in their own protocol, which small calls may ride in the exchange.
//
// Every method is given the call (HostCall): its descriptor as the caller made it, its sequence
// number and tag base, its name for errors, its deadline and its flight-recorder entry. Methods
// throw pstate::Error as the transports do (TIMEOUT, PEER_LOST, MISMATCH, ...); the group decides
// what an error does to the context. Same thread rules as the group: one thread at a time.
#pragma once

#include "common/deadline.hpp"
#include "common/log.hpp"
#include "common/op_descriptor.hpp"
#include "common/p2p_message_kind.hpp"
#include "common/trace.hpp"

#include <pstate/pstate.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pstate {

namespace agree {
struct Table;
}

// One call as the group hands it to its communicator. Collectives are numbered (seq, tag) and
// described (desc: the descriptor the caller made, whose seq is not set; the shared-memory
// protocol compares it as it is); point-to-point calls have neither (desc nullptr, tag 0).
struct HostCall {
  const OpDescriptor *desc = nullptr;
  uint32_t seq = 0;
  uint32_t tag = 0;         // tag base of the call's messages
  const char *op = "call";  // its name in errors (a string literal)
  // A fresh copy per wait that asks for one (the context's timeout from its first question).
  Deadline op_deadline = Deadline::never();
  TraceRecorder *trace = nullptr;
  uint64_t trace_id = 0;  // its flight-recorder entry (0: none)
  // The path that carried it, for the call observer (group/call_observer.hpp): the group's, or
  // what took() says.
  mutable TracePath path = TracePath::kNone;

  Deadline deadline() const { return op_deadline; }
  OpKind kind() const { return static_cast<OpKind>(desc->op); }
  // The call went another way than the communicator's path (an operation that UCX carries in a
  // shared-memory group): its flight-recorder entry and its metrics say so.
  void took(TracePath p) const {
    path = p;
    if (trace != nullptr && trace_id != 0) trace->set_path(trace_id, p);
  }
};

// The INFO line of a group's choice of algorithm ("tp:0 all_reduce: 8 B on 2 ranks -> shared
// memory"): once for the first call of each operation and once for its second. One per group,
// shared by its communicators and the group's own folded paths, so the lines do not repeat.
class Explainer {
 public:
  Explainer(const Logger &log, const std::string &group_name, int size) : log_(log), name_(group_name), size_(size) {}
  // op: the public operation (kAllReduce .. kReduceScatterV, kAllToAllV), whatever kind the call carries.
  void operator()(OpKind op, const char *algorithm, size_t bytes) {
    if (log_.enabled(LogLevel::kInfo)) log_choice(op, algorithm, bytes);
  }

 private:
  void log_choice(OpKind op, const char *algorithm, size_t bytes);
  const Logger &log_;
  const std::string &name_;
  int size_;
  // Two bits per operation kind: its first and its second algorithm already explained at INFO.
  uint64_t logged_ = 0;
  static_assert(2 * static_cast<int>(OpKind::kLast) <= 64, "two bits per operation kind");
};

// What every communicator of a group is made with.
struct HostCommSetup {
  std::string name;        // the group's ("tp:0"), in every message
  std::vector<int> ranks;  // launch ranks in group order: the transports' identity of each rank
  int rank = -1;           // this rank's index in ranks
  uint32_t group_id = 0;   // unique among this rank's live groups (tags, segment names)
  const Logger *log = nullptr;
  Explainer *explain = nullptr;
};

// A non-blocking point-to-point operation of a communicator (pstate_isend / pstate_irecv): what
// the communicator needs to find it again; the group's RequestState holds one.
struct HostRequest {
  uint32_t owner = 0;  // UCX: the worker owner of this request alone
  uint64_t op = 0;     // the transport's operation id
};

class HostComm {
 public:
  // path: what the flight recorder and the log say its own calls take; object_path: its objects'.
  // agrees_in_protocol: its collectives compare the descriptors themselves (shared memory's flag
  // words), so the group exchanges them first only under PSTATE_CHECK=1.
  HostComm(TracePath path, TracePath object_path, bool agrees_in_protocol)
      : path_(path), object_path_(object_path), agrees_(agrees_in_protocol) {}
  virtual ~HostComm() = default;
  HostComm(const HostComm &) = delete;
  HostComm &operator=(const HostComm &) = delete;

  // ---- facts, fixed at construction ----
  TracePath path() const { return path_; }
  TracePath object_path() const { return object_path_; }
  bool agrees_in_protocol() const { return agrees_; }
  bool folds(OpKind kind) const { return (fold_mask_ >> static_cast<uint32_t>(kind)) & 1u; }
  // The communicator of the same ranks over the network (UCX), which reaches them on any host:
  // this one, or the one a shared-memory communicator hands objects to. The group runs there what
  // must cross the network even inside a host: the barrier that proves the transport at start-up,
  // the device point-to-point checks, and the count of messages no receive took.
  virtual HostComm &network() { return *this; }

  // ---- the agreement ----
  // The agreement exchange: every rank's record (its numbered descriptor `mine`, and a folded
  // call's payload) into table, by group rank, on the tags from `tag` on.
  virtual void exchange(const HostCall &call, const OpDescriptor &mine, const void *payload, uint32_t tag,
                        agree::Table *table) = 0;
  // A collective this communicator does not carry itself (a refusal; what it hands elsewhere)
  // still takes part in its agreement, so it meets whatever the peers call there.
  virtual void arrive(const HostCall &call) = 0;

  // ---- collectives (arguments checked by src/api/; the in-place forms of coll/algorithms.hpp) ----
  virtual void all_reduce(const HostCall &call, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                          pstate_reduce_op_t op) = 0;
  virtual void all_gather(const HostCall &call, const void *send, void *recv, size_t send_count,
                          pstate_dtype_t dtype) = 0;
  virtual void reduce_scatter(const HostCall &call, const void *send, void *recv, size_t recv_count,
                              pstate_dtype_t dtype, pstate_reduce_op_t op) = 0;
  virtual void broadcast(const HostCall &call, void *buf, size_t count, pstate_dtype_t dtype, int root) = 0;
  virtual void gather(const HostCall &call, const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
                      int root) = 0;
  virtual void all_to_all(const HostCall &call, const void *send, void *recv, size_t count_per_rank,
                          pstate_dtype_t dtype) = 0;
  virtual void reduce(const HostCall &call, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                      pstate_reduce_op_t op, int root) = 0;
  virtual void scatter(const HostCall &call, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                       int root) = 0;
  // counts: one element count per group rank, summing to total; call.desc carries their hash.
  virtual void all_gatherv(const HostCall &call, const void *send, void *recv, const size_t *counts, size_t total,
                           pstate_dtype_t dtype) = 0;
  virtual void reduce_scatterv(const HostCall &call, const void *send, void *recv, const size_t *counts, size_t total,
                               pstate_dtype_t dtype, pstate_reduce_op_t op) = 0;
  // call.kind(): kBarrier, or kFinalize / kDestroy / kModelParallelReady (the library's own).
  virtual void barrier(const HostCall &call) = 0;
  // Objects: bytes of any size, the receivers learn it.
  virtual void broadcast_object(const HostCall &call, const void *data, size_t size, int root,
                                std::vector<uint8_t> *out) = 0;
  virtual void all_gather_object(const HostCall &call, const void *data, size_t size, std::vector<uint8_t> *out,
                                 std::vector<size_t> *sizes) = 0;
  // n bytes from group rank 0 to every rank (the NCCL unique id).
  virtual void broadcast_bytes(const HostCall &call, void *bytes, size_t n) = 0;

  // ---- point-to-point (not numbered: only two ranks take part) ----
  // Tensors and objects are two streams per peer and direction (common/p2p_message_kind.hpp):
  // the k-th send meets the k-th receive of its stream; `what` (kind, dtype) travels with the
  // message, and a receive takes only a message of its own what and size (else MISMATCH).
  virtual void send(const HostCall &call, int peer, const void *buf, size_t bytes, uint32_t what) = 0;
  virtual void recv(const HostCall &call, int peer, void *buf, size_t bytes, uint32_t what) = 0;
  virtual void send_object(const HostCall &call, int peer, const void *data, size_t size, uint32_t what) = 0;
  virtual void recv_object(const HostCall &call, int peer, std::vector<uint8_t> *out, uint32_t what) = 0;
  // pstate_p2p_batch: every op posted in list order (posting(i) just before op i), then one wait
  // for all under call's deadline; on failure no op touches its buffer again.
  virtual void p2p_batch(const HostCall &call, const pstate_p2p_op_t *ops, size_t n,
                         const std::function<void(size_t)> &posting) = 0;

  // ---- requests (pstate_isend / pstate_irecv): they outlive the call that posts them ----
  // Posts a send (sending) or receive of bytes with group rank peer on the tensor stream; a failure
  // of another call never cancels it, and its own cancels only itself.
  virtual void post(HostRequest &r, bool sending, int peer, void *buf, size_t bytes, uint32_t what,
                    const Deadline &deadline) = 0;
  // Never blocks: true once done. test_deadline (the context timeout from the post, made at
  // `since`) ends it with TIMEOUT, naming op ("isend" / "irecv") and peer.
  virtual bool test(HostRequest &r, const char *op, int peer, const Deadline &test_deadline,
                    Deadline::Clock::time_point since) = 0;
  // The context failed while r was pending: true when it completed (what arrived is kept).
  virtual bool settle(HostRequest &r, const char *op, const Deadline &test_deadline,
                      Deadline::Clock::time_point since) = 0;
  virtual void wait(HostRequest &r, const char *op, const Deadline &deadline) = 0;
  // Forgets r: its buffer is the caller's again (a no-op when it already left the transport).
  virtual void cancel(HostRequest &r) noexcept = 0;

  // ---- messages no receive took (pstate_destroy_model_parallel; a communicator that counts) ----
  // Point-to-point messages this rank posted to (sending) or from peer on stream so far.
  virtual uint32_t posted(P2PStream, int /*peer*/, bool /*sending*/) const { return 0; }
  // Receives and drops what peer sent on stream up to its count `sent` that no receive of this
  // rank took; returns how many.
  virtual uint32_t drop_undelivered(const HostCall &, P2PStream, int /*peer*/, uint32_t /*sent*/) { return 0; }

  // ---- added after the rest (the vtable only grows at its end) ----
  // all_to_all_v: counts and displacements in elements, one entry per group rank each. The counts
  // are agreed first (every rank's, coll::agree_alltoallv_counts): a pair whose counts disagree
  // is MISMATCH on every rank, thrown as AgreedError before any data moved (the group stays in
  // step). agree_all_to_all_v_counts is that step alone (a device call under PSTATE_CHECK=1).
  virtual void all_to_all_v(const HostCall &call, const void *send, const size_t *send_counts,
                            const size_t *send_displs, void *recv, const size_t *recv_counts,
                            const size_t *recv_displs, pstate_dtype_t dtype) = 0;
  virtual void agree_all_to_all_v_counts(const HostCall &call, const size_t *send_counts,
                                         const size_t *recv_counts) = 0;

 protected:
  // Bit k set: a small call of OpKind k may ride in the agreement exchange
  // (coll/agreement_exchange.hpp); none by default.
  void set_fold_mask(uint32_t mask) { fold_mask_ = mask; }

 private:
  TracePath path_;
  TracePath object_path_;
  bool agrees_;
  uint32_t fold_mask_ = 0;
};

}  // namespace pstate
