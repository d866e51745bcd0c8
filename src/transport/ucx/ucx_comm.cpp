// ucx_comm.cpp — UcxComm: the collectives as src/coll/ algorithms over the group's UcxChannel (the
// selector's choice explained at INFO), point-to-point on per-peer tags, requests on owners of
// their own.
#include "transport/ucx/ucx_comm.hpp"

#include "coll/agreement_exchange.hpp"
#include "coll/algorithms.hpp"
#include "coll/select.hpp"
#include "reduce/reduce.hpp"
#include "transport/ucx/ucx_channel.hpp"
#include "transport/ucx/ucx_tag.hpp"

#include <vector>

namespace pstate {

namespace {

constexpr uint32_t bit(OpKind kind) {
  return 1u << static_cast<uint32_t>(kind);
}

// The calls that ride in the agreement exchange unless PSTATE_ALGO_<family> forces an algorithm
// (then the forced one runs at every size: the transport-variant tests rely on that).
uint32_t fold_mask(const coll::AlgorithmSelector &s) {
  return (s.allreduce_forced() ? 0 : bit(OpKind::kAllReduce)) | (s.allgather_forced() ? 0 : bit(OpKind::kAllGather)) |
         (s.broadcast_forced() ? 0 : bit(OpKind::kBroadcast)) | (s.reduce_forced() ? 0 : bit(OpKind::kReduce)) |
         (s.barrier_forced() ? 0 : bit(OpKind::kBarrier));
}

class UcxComm final : public HostComm {
 public:
  UcxComm(UcxWorker &worker, const HostCommSetup &setup, const CallPosition *position)
      : HostComm(setup.ranks.size() == 1 ? TracePath::kLocal : TracePath::kUcx, TracePath::kUcx, false),
        channel_(worker, setup.ranks, setup.rank, setup.group_id, setup.name),
        explain_(*setup.explain),
        name_(setup.name),
        ranks_(setup.ranks) {
    channel_.set_position(position);
    set_fold_mask(fold_mask(selector_));
    p2p_sent_.assign(2 * setup.ranks.size(), 0);
    p2p_received_.assign(2 * setup.ranks.size(), 0);
  }

  // ---- the agreement: the exchange (run by the group) is all there is of it here ----

  void exchange(const HostCall &call, const OpDescriptor &mine, const void *payload, uint32_t tag,
                agree::Table *table) override {
    enter(call);
    agree::exchange(channel_, mine, payload, tag, table);
  }
  void arrive(const HostCall &) override {}

  // ---- collectives: the selector's algorithm over the channel ----

  void all_reduce(const HostCall &call, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                  pstate_reduce_op_t op) override {
    const size_t bytes = enter(call, count, dtype);
    run(OpKind::kAllReduce, selector_.allreduce(size(), count, bytes), bytes, send, recv, count, dtype, op, call.tag);
  }
  void all_gather(const HostCall &call, const void *send, void *recv, size_t send_count,
                  pstate_dtype_t dtype) override {
    const size_t bytes = enter(call, send_count, dtype);
    run(OpKind::kAllGather, selector_.allgather(size(), bytes), bytes, send, recv, send_count, dtype, call.tag);
  }
  void reduce_scatter(const HostCall &call, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                      pstate_reduce_op_t op) override {
    const size_t bytes = enter(call, recv_count, dtype) * static_cast<size_t>(size());
    run(OpKind::kReduceScatter, selector_.reduce_scatter(size(), bytes), bytes, send, recv, recv_count, dtype, op,
        call.tag);
  }
  void broadcast(const HostCall &call, void *buf, size_t count, pstate_dtype_t dtype, int root) override {
    const size_t bytes = enter(call, count, dtype);
    run(OpKind::kBroadcast, selector_.broadcast(size(), bytes), bytes, buf, count, dtype, root, call.tag);
  }
  void gather(const HostCall &call, const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
              int root) override {
    const size_t bytes = enter(call, send_count, dtype);
    run(OpKind::kGather, selector_.gather(size(), bytes), bytes, send, recv, send_count, dtype, root, call.tag);
  }
  void all_to_all(const HostCall &call, const void *send, void *recv, size_t count_per_rank,
                  pstate_dtype_t dtype) override {
    const size_t bytes = enter(call, count_per_rank, dtype);
    run(OpKind::kAllToAll, selector_.alltoall(size(), bytes), bytes, send, recv, count_per_rank, dtype, call.tag);
  }
  void reduce(const HostCall &call, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
              pstate_reduce_op_t op, int root) override {
    const size_t bytes = enter(call, count, dtype);
    run(OpKind::kReduce, selector_.reduce(size(), count, bytes), bytes, send, recv, count, dtype, op, root, call.tag);
  }
  void scatter(const HostCall &call, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
               int root) override {
    const size_t bytes = enter(call, recv_count, dtype);
    run(OpKind::kScatter, selector_.scatter(size(), bytes), bytes, send, recv, recv_count, dtype, root, call.tag);
  }
  void all_gatherv(const HostCall &call, const void *send, void *recv, const size_t *counts, size_t total,
                   pstate_dtype_t dtype) override {
    explain_(OpKind::kAllGatherV, "ring", enter(call, total, dtype));
    coll::allgatherv_ring(channel_, send, recv, counts, dtype, call.tag);
  }
  void reduce_scatterv(const HostCall &call, const void *send, void *recv, const size_t *counts, size_t total,
                       pstate_dtype_t dtype, pstate_reduce_op_t op) override {
    explain_(OpKind::kReduceScatterV, "ring", enter(call, total, dtype));
    coll::reduce_scatterv_ring(channel_, send, recv, counts, dtype, op, call.tag);
  }
  void all_to_all_v(const HostCall &call, const void *send, const size_t *send_counts, const size_t *send_displs,
                    void *recv, const size_t *recv_counts, const size_t *recv_displs, pstate_dtype_t dtype) override {
    agree_all_to_all_v_counts(call, send_counts, recv_counts);
    size_t sent = 0;
    for (int j = 0; j < size(); ++j) sent += send_counts[j];
    explain_(OpKind::kAllToAllV, "pairwise", sent * dtype_size(dtype));
    coll::alltoallv_pairwise(channel_, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype,
                             call.tag);
  }
  void agree_all_to_all_v_counts(const HostCall &call, const size_t *send_counts,
                                 const size_t *recv_counts) override {
    enter(call);
    const coll::AlltoallvDisagreement bad = coll::agree_alltoallv_counts(channel_, send_counts, recv_counts, call.tag);
    if (!bad.found) return;
    const auto global = [&](int r) { return ranks_[static_cast<size_t>(r)]; };
    throw AgreedError(
        PSTATE_ERR_MISMATCH,
        cat(name_, " #", call.seq, " all_to_all_v: group rank ", bad.sender, " (rank ", global(bad.sender),
            ") sends ", bad.sent, " elements to group rank ", bad.receiver, " (rank ", global(bad.receiver),
            "), whose recv_counts[", bad.sender, "] is ", bad.expected, " (this rank: group rank ", channel_.rank(),
            "): every pair must agree, send_counts[j] of group rank i == recv_counts[i] of group rank j; the "
            "call fails on every rank before any data moved, and the group stays in step and usable"));
  }
  void barrier(const HostCall &call) override {
    enter(call);
    run(OpKind::kBarrier, selector_.barrier(size()), 0, call.tag);
  }
  void broadcast_object(const HostCall &call, const void *data, size_t size, int root,
                        std::vector<uint8_t> *out) override {
    enter(call);
    coll::broadcast_object(channel_, data, size, root, out, call.tag);
  }
  void all_gather_object(const HostCall &call, const void *data, size_t size, std::vector<uint8_t> *out,
                         std::vector<size_t> *sizes) override {
    enter(call);
    coll::all_gather_object(channel_, data, size, out, sizes, call.tag);
  }
  void broadcast_bytes(const HostCall &call, void *bytes, size_t n) override {
    enter(call);
    coll::broadcast_binomial(channel_, bytes, n, PSTATE_UINT8, 0, call.tag);
  }

  // ---- point-to-point: per-peer tags in their own space (ucx_tag.hpp) ----

  void send(const HostCall &call, int peer, const void *buf, size_t bytes, uint32_t what) override {
    enter(call);
    channel_.send(peer, buf, bytes, p2p_tag(peer, true, P2PStream::kTensors, what));
  }
  void recv(const HostCall &call, int peer, void *buf, size_t bytes, uint32_t what) override {
    enter(call);
    channel_.recv(peer, buf, bytes, p2p_tag(peer, false, P2PStream::kTensors, what));
  }
  void send_object(const HostCall &call, int peer, const void *data, size_t size, uint32_t what) override {
    enter(call);
    coll::send_object(channel_, data, size, peer, p2p_tag(peer, true, P2PStream::kObjects, what));
  }
  void recv_object(const HostCall &call, int peer, std::vector<uint8_t> *out, uint32_t what) override {
    enter(call);
    coll::recv_object(channel_, peer, out, p2p_tag(peer, false, P2PStream::kObjects, what));
  }
  // Every op posted (tags in list order) on the channel's own owner, then one wait for all: a
  // failure cancels what is still outstanding (the channel's rule).
  void p2p_batch(const HostCall &call, const pstate_p2p_op_t *ops, size_t n,
                 const std::function<void(size_t)> &posting) override {
    enter(call);
    std::vector<Channel::Request> pending;
    pending.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const pstate_p2p_op_t &o = ops[i];
      posting(i);
      const size_t bytes = o.count * dtype_size(o.dtype);
      const uint32_t tag = p2p_tag(o.peer, o.is_send != 0, P2PStream::kTensors, p2p_what(TensorKind::kSend, o.dtype));
      pending.push_back(o.is_send != 0 ? channel_.isend(o.peer, o.buf, bytes, tag)
                                       : channel_.irecv(o.peer, o.buf, bytes, tag));
    }
    channel_.wait_all(pending.data(), pending.size());
  }

  // ---- requests: each on a worker owner of its own (UcxChannel::new_request_owner) ----

  void post(HostRequest &r, bool sending, int peer, void *buf, size_t bytes, uint32_t what, const Deadline &) override {
    r.owner = channel_.new_request_owner();
    const uint32_t tag = p2p_tag(peer, sending, P2PStream::kTensors, what);
    r.op = sending ? channel_.isend_owned(r.owner, peer, buf, bytes, tag)
                   : channel_.irecv_owned(r.owner, peer, buf, bytes, tag);
  }
  bool test(HostRequest &r, const char *op, int, const Deadline &test_deadline,
            Deadline::Clock::time_point since) override {
    return channel_.test_owned(r.owner, r.op, op, test_deadline, since);
  }
  bool settle(HostRequest &r, const char *op, const Deadline &test_deadline,
              Deadline::Clock::time_point since) override {
    return test(r, op, -1, test_deadline, since);
  }
  void wait(HostRequest &r, const char *op, const Deadline &deadline) override {
    channel_.wait_owned(r.owner, r.op, op, deadline);
  }
  void cancel(HostRequest &r) noexcept override { channel_.cancel_owned(r.owner); }

  // ---- messages no receive took ----

  uint32_t posted(P2PStream stream, int peer, bool sending) const override {
    return sending ? p2p_sent_[at(stream, peer)] : p2p_received_[at(stream, peer)];
  }
  uint32_t drop_undelivered(const HostCall &call, P2PStream stream, int peer, uint32_t sent) override {
    uint32_t &received = p2p_received_[at(stream, peer)];
    const uint32_t missing = sent - received;
    if (missing == 0 || missing > (1u << 31)) return 0;  // none, or this rank took more (a bug elsewhere)
    enter(call);
    std::vector<std::vector<uint8_t>> scratch(missing);
    std::vector<Channel::Request> pending;
    for (uint32_t k = 0; k < missing; ++k)
      pending.push_back(channel_.irecv_any_what(peer, &scratch[k], ucx::p2p_algo_tag(stream, 0, received++)));
    channel_.wait_all(pending.data(), pending.size());
    return missing;
  }

 private:
  // The channel's waits from here on take the call's deadline and name (set before every use).
  void enter(const HostCall &call) {
    channel_.set_deadline(call.deadline());
    channel_.set_op_name(call.op);
  }
  // The same; returns count elements' bytes (one rank's buffer, for the selector and the log).
  size_t enter(const HostCall &call, size_t count, pstate_dtype_t dtype) {
    enter(call);
    return count * dtype_size(dtype);
  }
  // Runs the selector's choice over the channel (args: the algorithm's, the tag base last) and
  // explains it at INFO.
  template <typename Choice, typename... Args>
  void run(OpKind op, const Choice &choice, size_t bytes, Args... args) {
    explain_(op, choice.name, bytes);
    choice.fn(channel_, args...);
  }
  size_t at(P2PStream stream, int peer) const {
    return static_cast<size_t>(stream) * static_cast<size_t>(size()) + static_cast<size_t>(peer);
  }
  // The next tag of (stream, peer, direction): its counter, and `what` for the receiver's check.
  uint32_t p2p_tag(int peer, bool sending, P2PStream stream, uint32_t what) {
    uint32_t &counter = sending ? p2p_sent_[at(stream, peer)] : p2p_received_[at(stream, peer)];
    return ucx::p2p_algo_tag(stream, what, counter++);
  }
  int size() const { return channel_.size(); }

  coll::AlgorithmSelector selector_;  // first: it reads PSTATE_ALGO_* and refuses a bad value
  UcxChannel channel_;
  Explainer &explain_;
  std::string name_;        // the group's, in messages
  std::vector<int> ranks_;  // launch ranks in group order
  // Messages posted per (stream, peer): index stream * size() + peer.
  std::vector<uint32_t> p2p_sent_, p2p_received_;
};

}  // namespace

std::unique_ptr<HostComm> make_ucx_comm(UcxWorker &worker, const HostCommSetup &setup, const CallPosition *position) {
  return std::make_unique<UcxComm>(worker, setup, position);
}

}  // namespace pstate
