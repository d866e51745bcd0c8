// shm_comm.cpp — ShmComm: the shared-memory transports of one group, made on first use, and the
// operations they carry; the rest goes to the network communicator after the shared-memory
// agreement (arrive).
#include "transport/shm/shm_comm.hpp"

#include "common/process_watch.hpp"

#include "reduce/reduce.hpp"
#include "transport/shm/message_queue.hpp"
#include "transport/shm/shm_group.hpp"
#include "transport/shm/shm_p2p.hpp"
#include "transport/shm/shm_wait.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace pstate::shm {

namespace {

// PSTATE_SHM_CMA=0: no rank reads another's memory (process_vm_readv); everything by value.
bool cma_refused() {
  const char *cma = std::getenv("PSTATE_SHM_CMA");
  return cma != nullptr && std::string(cma) == "0";
}

class ShmComm final : public HostComm {
 public:
  ShmComm(const HostCommSetup &setup, ShmCommHooks hooks, std::unique_ptr<HostComm> network)
      : HostComm(TracePath::kShm, network->object_path(), true),
        setup_(setup),
        hooks_(std::move(hooks)),
        explain_(*setup.explain),
        network_(std::move(network)) {}
  ~ShmComm() override {
    mq_.reset();
    segment_.reset();
    // The pair segments of this rank: the engine's teardown decides which names go (shm_p2p.hpp); a
    // rank that never made one still removes the names its peers may have made for it.
    if (p2p_)
      p2p_.reset();
    else
      try {
        ShmP2p::remove_pair_names(name("p2p"), setup_.rank, size());
      } catch (...) {  // no memory for the base name
      }
    watches_.clear();
    network_.reset();
  }

  HostComm &network() override { return *network_; }

  // ---- the agreement: in the segment's flag words; the exchange (PSTATE_CHECK=1) on the network ----
  void exchange(const HostCall &call, const OpDescriptor &mine, const void *payload, uint32_t tag,
                agree::Table *table) override {
    network_->exchange(call, mine, payload, tag, table);
  }
  void arrive(const HostCall &call) override {
    call.took(TracePath::kUcx);
    for_call(call).arrive(*call.desc, call.deadline());
  }

  // ---- collectives in the segment ----
  void all_reduce(const HostCall &call, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                  pstate_reduce_op_t op) override {
    explain_(OpKind::kAllReduce, "shared memory", count * dtype_size(dtype));
    for_call(call).all_reduce(send, recv, count, dtype, op, call.deadline(), call.kind());
  }
  void all_gather(const HostCall &call, const void *send, void *recv, size_t send_count,
                  pstate_dtype_t dtype) override {
    explain_(OpKind::kAllGather, "shared memory", send_count * dtype_size(dtype));
    for_call(call).all_gather(send, recv, send_count, dtype, call.deadline(), call.kind());
  }
  void reduce_scatter(const HostCall &call, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                      pstate_reduce_op_t op) override {
    explain_(OpKind::kReduceScatter, "shared memory", recv_count * dtype_size(dtype) * static_cast<size_t>(size()));
    for_call(call).reduce_scatter(send, recv, recv_count, dtype, op, call.deadline());
  }
  void broadcast(const HostCall &call, void *buf, size_t count, pstate_dtype_t dtype, int root) override {
    explain_(OpKind::kBroadcast, "shared memory", count * dtype_size(dtype));
    for_call(call).broadcast(buf, count, dtype, root, call.deadline());
  }
  void reduce(const HostCall &call, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
              pstate_reduce_op_t op, int root) override {
    explain_(OpKind::kReduce, "shared memory", count * dtype_size(dtype));
    for_call(call).reduce(send, recv, count, dtype, op, root, call.deadline());
  }
  void scatter(const HostCall &call, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
               int root) override {
    explain_(OpKind::kScatter, "shared memory", recv_count * dtype_size(dtype));
    for_call(call).scatter(send, recv, recv_count, dtype, root, call.deadline());
  }
  // The v-collectives run here too (inline or staged), their agreement comparing the descriptor, its
  // counts hash included, with what every peer called.
  void all_gatherv(const HostCall &call, const void *send, void *recv, const size_t *counts, size_t total,
                   pstate_dtype_t dtype) override {
    explain_(OpKind::kAllGatherV, "shared memory", total * dtype_size(dtype));
    for_call(call).all_gatherv(send, recv, counts, dtype, *call.desc, call.deadline());
  }
  void reduce_scatterv(const HostCall &call, const void *send, void *recv, const size_t *counts, size_t total,
                       pstate_dtype_t dtype, pstate_reduce_op_t op) override {
    explain_(OpKind::kReduceScatterV, "shared memory", total * dtype_size(dtype));
    for_call(call).reduce_scatterv(send, recv, counts, dtype, op, *call.desc, call.deadline());
  }
  void barrier(const HostCall &call) override {
    explain_(OpKind::kBarrier, "shared memory", 0);
    for_call(call).barrier(call.deadline(), call.kind());
  }

  // ---- what the network carries, after the agreement here ----
  void gather(const HostCall &call, const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
              int root) override {
    arrive(call);
    network_->gather(call, send, recv, send_count, dtype, root);
  }
  void all_to_all(const HostCall &call, const void *send, void *recv, size_t count_per_rank,
                  pstate_dtype_t dtype) override {
    arrive(call);
    network_->all_to_all(call, send, recv, count_per_rank, dtype);
  }
  // all_to_all_v: the descriptor agrees in the segment, then counts and data go over the network
  // as all_to_all's do.
  void all_to_all_v(const HostCall &call, const void *send, const size_t *send_counts, const size_t *send_displs,
                    void *recv, const size_t *recv_counts, const size_t *recv_displs, pstate_dtype_t dtype) override {
    arrive(call);
    network_->all_to_all_v(call, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
  }
  void agree_all_to_all_v_counts(const HostCall &call, const size_t *send_counts,
                                 const size_t *recv_counts) override {
    network_->agree_all_to_all_v_counts(call, send_counts, recv_counts);
  }
  // broadcast_object from group rank 0 goes through the message queue (SGLang's broadcaster); a
  // payload larger than a ring chunk is announced through the ring and then sent over the network.
  void broadcast_object(const HostCall &call, const void *data, size_t size, int root,
                        std::vector<uint8_t> *out) override {
    arrive(call);
    if (root != 0) return network_->broadcast_object(call, data, size, root, out);
    ShmMessageQueue &mq = message_queue(call.deadline());
    if (setup_.rank == 0) {
      explain_(OpKind::kBroadcastObject, "message queue", size);
      if (!mq.enqueue(data, size, call.deadline()))
        network_->broadcast_object(call, data, size, 0, out);
      else if (out != nullptr)
        out->assign(static_cast<const uint8_t *>(data), static_cast<const uint8_t *>(data) + size);
      return;
    }
    auto got = mq.dequeue(out, call.deadline());
    if (got.overflow) network_->broadcast_object(call, nullptr, 0, 0, out);
  }
  void all_gather_object(const HostCall &call, const void *data, size_t size, std::vector<uint8_t> *out,
                         std::vector<size_t> *sizes) override {
    arrive(call);
    network_->all_gather_object(call, data, size, out, sizes);
  }
  void broadcast_bytes(const HostCall &call, void *bytes, size_t n) override {
    arrive(call);
    network_->broadcast_bytes(call, bytes, n);
  }

  // ---- point-to-point: tensors on the pair rings, objects on the network (both sides choose by
  // the call, so the k-th message still meets the k-th receive on each path) ----
  void send(const HostCall &call, int peer, const void *buf, size_t bytes, uint32_t what) override {
    const Deadline d = call.deadline();
    wait_or_cancel(p2p().post_send(peer, buf, bytes, d, what), d, "send");
  }
  void recv(const HostCall &call, int peer, void *buf, size_t bytes, uint32_t what) override {
    const Deadline d = call.deadline();
    wait_or_cancel(p2p().post_recv(peer, buf, bytes, d, what), d, "recv");
  }
  void send_object(const HostCall &call, int peer, const void *data, size_t size, uint32_t what) override {
    network_->send_object(call, peer, data, size, what);
  }
  void recv_object(const HostCall &call, int peer, std::vector<uint8_t> *out, uint32_t what) override {
    network_->recv_object(call, peer, out, what);
  }
  void p2p_batch(const HostCall &call, const pstate_p2p_op_t *ops, size_t n,
                 const std::function<void(size_t)> &posting) override {
    const Deadline d = call.deadline();
    std::vector<uint64_t> posted;
    posted.reserve(n);
    try {
      for (size_t i = 0; i < n; ++i) {
        const pstate_p2p_op_t &o = ops[i];
        posting(i);
        const size_t bytes = o.count * dtype_size(o.dtype);
        const uint32_t what = p2p_what(TensorKind::kSend, o.dtype);
        posted.push_back(o.is_send != 0 ? p2p().post_send(o.peer, o.buf, bytes, d, what)
                                        : p2p().post_recv(o.peer, o.buf, bytes, d, what));
      }
      p2p().wait(posted.data(), posted.size(), d, call.op);
    } catch (...) {
      if (p2p_)
        for (uint64_t id : posted) p2p_->cancel(id);  // the batch is over: its buffers are the caller's again
      throw;
    }
  }

  // ---- requests: operations of the rings, driven by their own test and wait ----
  void post(HostRequest &r, bool sending, int peer, void *buf, size_t bytes, uint32_t what,
            const Deadline &deadline) override {
    const Deadline d = deadline;
    r.op = sending ? p2p().post_send(peer, buf, bytes, d, what) : p2p().post_recv(peer, buf, bytes, d, what);
  }
  bool test(HostRequest &r, const char *op, int peer, const Deadline &test_deadline,
            Deadline::Clock::time_point posted) override {
    if (p2p().test(r.op)) return true;
    if (test_deadline.expired()) {
      p2p().progress();
      if (p2p().test(r.op)) return true;
      throw_error(PSTATE_ERR_TIMEOUT, setup_.name, " rank ", hooks_.global[static_cast<size_t>(setup_.rank)], ": ", op,
                  ": timed out after ",
                  std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::coarse_now() - posted).count(),
                  " ms (pstate_test; the group's timeout from the post): the transfer with group rank ", peer,
                  " has not completed; is the peer calling the matching operation?");
    }
    return false;
  }
  bool settle(HostRequest &r, const char *, const Deadline &, Deadline::Clock::time_point) override {
    return p2p().test(r.op);  // what already arrived is kept
  }
  void wait(HostRequest &r, const char *op, const Deadline &deadline) override { p2p().wait(r.op, deadline, op); }
  void cancel(HostRequest &r) noexcept override {
    if (p2p_) p2p_->cancel(r.op);
  }

 private:
  int size() const { return static_cast<int>(setup_.ranks.size()); }
  std::string name(const char *what) const { return hooks_.names + what; }

  // ---- the transports, made on first use ----
  ShmGroup &segment(const Deadline &deadline) {
    if (!segment_) {
      ShmGroupOptions o;
      o.label = setup_.name;
      o.liveness = [this] { check_waiting(); };
      o.global_ranks = setup_.ranks;
      // PSTATE_SHM_GATHERV_CMA_BYTES=N: all_gatherv whose largest part is N bytes or more reads the
      // peers' parts from their memory (off by default; every rank must set the same N).
      // PSTATE_SHM_CMA=0: no collective reads a peer's memory either (the group decides together).
      if (const char *n = std::getenv("PSTATE_SHM_GATHERV_CMA_BYTES"); n != nullptr && *n != '\0')
        o.cma_bytes = std::strtoull(n, nullptr, 10);
      if (cma_refused()) o.cma_allowed = false;
      segment_ = std::make_unique<ShmGroup>(name("coll"), setup_.rank, size(), deadline, o);
      setup_.log->info(segment_->describe());
    }
    return *segment_;
  }
  // The segment for `call`, whose sequence number goes into its messages.
  ShmGroup &for_call(const HostCall &call) {
    ShmGroup &s = segment(call.deadline());
    s.set_seq(call.seq);
    return s;
  }
  ShmMessageQueue &message_queue(const Deadline &deadline) {
    if (!mq_) {
      ShmMessageQueueOptions o;
      o.label = setup_.name + " mq";
      o.liveness = [this] { check_waiting(); };
      mq_ = std::make_unique<ShmMessageQueue>(name("mq"), setup_.rank, size(), 0, deadline, o);
      setup_.log->info(mq_->describe());
    }
    return *mq_;
  }
  ShmP2p &p2p() {
    if (!p2p_) {
      ShmP2pOptions o;
      o.label = setup_.name;
      o.liveness = [this] { check_waiting(); };
      o.peer_gone = [this](int r) {
        const int64_t pid = hooks_.pid_of(r);
        return pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
      };
      o.same_process = [this](int r) { return hooks_.pid_of(r) == ::getpid(); };
      o.spin = !oversubscribed(size());
      o.global_ranks = setup_.ranks;
      // PSTATE_SHM_CMA=0: large messages by value through the rings too (two copies), never by
      // reference (process_vm_readv, one copy)
      if (cma_refused()) o.cma_bytes = 0;
      o.on_cma_refused = [this](int peer, int err) {
        setup_.log->info("group ", setup_.name, ": this rank may not read the memory of group rank ", peer,
                         " (process_vm_readv: ", std::strerror(err),
                         "; a ptrace policy or seccomp filter?): its large messages to this rank go through the ring "
                         "(two copies) from now on");
      };
      p2p_ = std::make_unique<ShmP2p>(name("p2p"), setup_.rank, size(), o);
      setup_.log->info(p2p_->describe());
    }
    return *p2p_;
  }

  // ---- liveness ----
  // The waits' periodic check: ring progress, the group's notices, the peers' exits, its stop.
  void check_waiting() {
    if (p2p_) p2p_->progress();  // pending shared-memory sends move while this rank waits for anything
    hooks_.notices();            // first: a peer's notice says why, its exit only that it left
    check_peers_alive();
    hooks_.stop();
  }
  // Throws PEER_LOST when a peer's process has exited.
  void check_peers_alive() {
    if (watches_.empty()) {
      for (int i = 0; i < size(); ++i) {
        const int64_t pid = hooks_.pid_of(i);
        if (i == setup_.rank || pid == ::getpid()) continue;
        watches_.push_back(std::make_unique<ProcessWatch>(static_cast<pid_t>(pid)));
      }
    }
    for (auto &w : watches_) {
      if (!w->exited()) continue;
      int dead = -1;
      for (int i = 0; i < size(); ++i)
        if (hooks_.pid_of(i) == w->pid()) dead = hooks_.global[static_cast<size_t>(i)];
      throw_error(PSTATE_ERR_PEER_LOST, setup_.name, ": rank ", dead, " (pid ", w->pid(), ") exited while rank ",
                  hooks_.global[static_cast<size_t>(setup_.rank)], " waited for it in shared memory; ",
                  kPeerLostWayOut);
    }
  }
  // A blocking operation on the rings: on failure it is cancelled, so the buffer, the caller's
  // again, is never touched by a later progress of the rings.
  void wait_or_cancel(uint64_t id, const Deadline &deadline, const char *what) {
    try {
      p2p().wait(id, deadline, what);
    } catch (...) {
      p2p().cancel(id);
      throw;
    }
  }

  HostCommSetup setup_;
  ShmCommHooks hooks_;
  Explainer &explain_;
  std::unique_ptr<HostComm> network_;
  std::unique_ptr<ShmGroup> segment_;
  std::unique_ptr<ShmMessageQueue> mq_;
  std::unique_ptr<ShmP2p> p2p_;
  std::vector<std::unique_ptr<ProcessWatch>> watches_;  // peers in other processes
};

}  // namespace

std::unique_ptr<HostComm> make_shm_comm(const HostCommSetup &setup, ShmCommHooks hooks,
                                        std::unique_ptr<HostComm> network) {
  return std::make_unique<ShmComm>(setup, std::move(hooks), std::move(network));
}

}  // namespace pstate::shm
