// ucx_worker.cpp — UcxWorker's life: context and worker creation, lazy endpoints, posting tagged
// sends and receives, cancellation, graceful and forced teardown. The wait loop (progress, spin
// then block, failure detection) lives in ucx_wait.cpp.
#include "transport/ucx/ucx_worker.hpp"

#include "bootstrap/netif.hpp"
#include "common/dev_shm.hpp"
#include "transport/ucx/ucx_tag.hpp"

#include <ucs/config/global_opts.h>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <new>

namespace pstate {

namespace {

[[noreturn]] void throw_ucx(const char *call, ucs_status_t status, const std::string &context) {
  throw_error(PSTATE_ERR_TRANSPORT, "ucx: ", call, " failed", context.empty() ? "" : " (", context,
              context.empty() ? "" : ")", ": ", ucs_status_string(status));
}

// UCX prints its own ERROR and WARN lines on stderr, which repeat or garble what pstate reports
// (a failure is said once, by pstate): they show only at PSTATE_DEBUG=TRACE, or when the user set
// UCX_LOG_LEVEL. UCX's log level is one per process, so it is set once per process.
void quiet_ucx_log(const Logger &logger) {
  static std::once_flag once;
  if (std::getenv("UCX_LOG_LEVEL") != nullptr || logger.enabled(LogLevel::kTrace)) return;
  std::call_once(once, [] { ucs_global_opts_set_value("LOG_LEVEL", "fatal"); });
}

// ucp_worker_create's NO_RESOURCE / NO_MEMORY with a nearly full /dev/shm: UCX's posix transport
// could not map its receive pool (about 4 MiB per worker).
std::string worker_create_hint(ucs_status_t st) {
  if (st != UCS_ERR_NO_RESOURCE && st != UCS_ERR_NO_MEMORY) return "";
  DevShmSpace space = dev_shm_space();
  if (space.known && space.free_bytes >= (uint64_t{16} << 20)) return "";
  return dev_shm_advice(space, "UCX's shared-memory transport (posix) needs about 4 MiB per rank");
}

// RAII for a ucp_config_t (read from the environment, then modified).
struct ConfigHolder {
  ucp_config_t *config = nullptr;
  ~ConfigHolder() {
    if (config != nullptr) ucp_config_release(config);
  }
};

// Receives never complete immediately: UCX 1.13 does not fill recv_info.tag_info when
// ucp_tag_recv_nbx completes at once, so the length would be unknown; with a request,
// ucp_tag_recv_request_test reports it.
ucp_request_param_t recv_param() {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  return param;
}

}  // namespace

UcxWorker::UcxWorker(UcxWorkerOptions options) : options_(std::move(options)) {
  if (options_.world_size < 1 || options_.world_size > ucx::kMaxWorldSize)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "ucx: world size ", options_.world_size, " is outside 1..",
                ucx::kMaxWorldSize);
  if (options_.world_rank < 0 || options_.world_rank >= options_.world_size)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "ucx: world rank ", options_.world_rank, " is outside 0..",
                options_.world_size - 1);
  if (options_.wait.spin_us < 0 || options_.wait.max_block_ms < 1 || options_.wait.network_spin_max_us < 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT,
                "ucx: wait policy needs spin_us >= 0, network_spin_max_us >= 0 and max_block_ms >= 1");
  net_typical_us_ = options_.wait.network_spin_max_us / 2.0;
  options_.logger.set_rank(options_.world_rank);
  try {
    init_context();
    init_worker();
  } catch (...) {
    destroy_all();
    throw;
  }
  check_socket_ifname();
  if (options_.logger.enabled(LogLevel::kInfo))
    options_.logger.info("ucx: worker ready, address ", address_.size(), " bytes; ", describe_transports());
}

UcxWorker::~UcxWorker() { force_close(); }

void UcxWorker::init_context() {
  quiet_ucx_log(options_.logger);
  ConfigHolder cfg;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &cfg.config);
  if (st != UCS_OK) throw_ucx("ucp_config_read", st, "check the UCX_* environment variables");
  if (!options_.socket_ifname.empty()) {
    // The rule (NCCL's syntax: prefixes, =exact, ^exclusions) picks this host's interfaces; UCX
    // takes their names.
    std::string devices;
    for (const auto &i : select_interfaces(options_.socket_ifname)) devices += (devices.empty() ? "" : ",") + i.name;
    st = ucp_config_modify(cfg.config, "NET_DEVICES", devices.c_str());
    if (st != UCS_OK) throw_ucx("ucp_config_modify(NET_DEVICES)", st, "PSTATE_SOCKET_IFNAME=" + options_.socket_ifname);
    options_.logger.info("ucx: UCX_NET_DEVICES=", devices, " (from PSTATE_SOCKET_IFNAME=", options_.socket_ifname, ")");
  }
  for (const auto &[name, value] : options_.ucx_config) {
    st = ucp_config_modify(cfg.config, name.c_str(), value.c_str());
    if (st != UCS_OK) throw_ucx("ucp_config_modify", st, "UCX_" + name + "=" + value);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.estimated_num_eps = static_cast<size_t>(options_.world_size);
  params.name = "pstate";
  st = ucp_init(&params, cfg.config, &context_);
  if (st != UCS_OK) throw_ucx("ucp_init", st, "no usable UCX transport? try unsetting UCX_TLS");
}

void UcxWorker::init_worker() {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t st = ucp_worker_create(context_, &params, &worker_);
  if (st != UCS_OK) {
    std::string hint = worker_create_hint(st);
    if (hint.empty()) throw_ucx("ucp_worker_create", st, "");
    throw_error(PSTATE_ERR_NO_MEMORY, "ucx: ucp_worker_create failed: ", ucs_status_string(st), ": ", hint);
  }
  st = ucp_worker_get_efd(worker_, &efd_);
  if (st != UCS_OK) throw_ucx("ucp_worker_get_efd", st, "the transports cannot wake a sleeping rank");
  ucp_address_t *addr = nullptr;
  size_t len = 0;
  st = ucp_worker_get_address(worker_, &addr, &len);
  if (st != UCS_OK) throw_ucx("ucp_worker_get_address", st, "");
  const auto *bytes = reinterpret_cast<const uint8_t *>(addr);
  address_.assign(bytes, bytes + len);
  ucp_worker_release_address(worker_, addr);
}

// UCX silently drops a NET_DEVICES entry it cannot open; say so, since peers on other hosts
// will then be unreachable.
void UcxWorker::check_socket_ifname() const {
  if (options_.socket_ifname.empty()) return;
  auto resources = transport_resources();
  bool found = false;
  for (const auto &i : select_interfaces(options_.socket_ifname)) {
    std::string suffix = "/" + i.name;
    found = found || std::any_of(resources.begin(), resources.end(), [&](const std::string &r) {
              return r.size() >= suffix.size() && r.compare(r.size() - suffix.size(), suffix.size(), suffix) == 0;
            });
  }
  if (!found)
    options_.logger.warn("ucx: PSTATE_SOCKET_IFNAME=", options_.socket_ifname,
                         " names no network device UCX can use (", describe_transports(),
                         "); ranks on other hosts will be unreachable — check the interface name");
}

PeerEntry UcxWorker::self_entry() const { return PeerEntry{address_, static_cast<int64_t>(::getpid()), options_.host_id}; }

// ---- peers and endpoints ------------------------------------------------------------------------

bool UcxWorker::peer_lost(int world_rank) {
  auto it = peers_.find(world_rank);
  if (it == peers_.end()) return false;
  Peer &p = *it->second;
  if (!p.exited && p.watch && p.watch->exited()) p.exited = true;
  if (!p.departed) p.departed = departed(world_rank);
  return p.lost();
}

void UcxWorker::forget_peer(int world_rank) noexcept {
  auto it = peers_.find(world_rank);
  if (it == peers_.end() || world_rank == options_.world_rank) return;
  if (worker_ != nullptr && it->second->ep != nullptr) close_endpoint(*it->second, true);
  forgotten_peers_.push_back(std::move(it->second));  // UCX may still hold it as an error-callback arg
  peers_.erase(it);
}

// The notice on the wire: u32 epoch, i32 dead, i32 status, u32 text bytes, i64 unix ms, text,
// then u32 n and n pairs of u32 (group id, calls returned).
void UcxWorker::post_notices(const std::vector<int> &world_ranks, int dead, pstate_status_t status,
                             const std::string &text,
                             const std::vector<std::pair<uint32_t, uint32_t>> &returned) noexcept {
  if (worker_ == nullptr) return;
  std::vector<uint8_t> notice;
  try {
    const std::string cut = text.substr(0, kNoticeTextBytes);
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    const int64_t unix_ms = static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
    const uint32_t groups = static_cast<uint32_t>(std::min(returned.size(), kNoticeMaxGroups));
    notice.resize(24 + cut.size() + 4 + 8 * size_t{groups});
    const uint32_t words[4] = {epoch_, static_cast<uint32_t>(dead), static_cast<uint32_t>(status),
                               static_cast<uint32_t>(cut.size())};
    std::memcpy(notice.data(), words, sizeof words);
    std::memcpy(notice.data() + 16, &unix_ms, 8);
    std::memcpy(notice.data() + 24, cut.data(), cut.size());
    uint8_t *at = notice.data() + 24 + cut.size();
    std::memcpy(at, &groups, 4);
    for (uint32_t i = 0; i < groups; ++i) {
      const uint32_t pair[2] = {returned[i].first, returned[i].second};
      std::memcpy(at + 4 + 8 * size_t{i}, pair, 8);
    }
  } catch (...) {
    return;  // no memory: the peers learn of the failure by themselves
  }
  // A new TCP endpoint connects synchronously in UCX 1.13 (uct_tcp_cm_conn_start), for minutes
  // when the other host's link is cut. A death leaves the hosts reachable, so its notice may open
  // endpoints to other hosts; any other failure (a timeout may be exactly such a cut) goes to
  // this host's ranks and over the endpoints already open, and the other hosts' ranks learn it
  // from those peers' own waits and notices.
  const bool may_connect = status == PSTATE_ERR_PEER_LOST;
  for (int r : world_ranks) {
    if (r == options_.world_rank || r == dead) continue;
    try {
      Peer *p = &peer(r, /*urgent=*/true);
      if (!p->departed) p->departed = departed(r);  // its host may be gone: never connect to it
      if (p->lost()) continue;
      if (!may_connect && !p->same_host && (p->ep == nullptr || p->ep_closed)) continue;
      // The failed wait force-closed the endpoints of its stuck sends: those peers are the ones
      // most likely blocked on this rank, so they get the notice over a new endpoint.
      if (p->ep_closed) {
        forget_peer(r);
        p = &peer(r, /*urgent=*/true);
      }
      ucp_ep_h ep = endpoint(*p);
      if (ep == nullptr) continue;
      notice_words_.push_back(notice);
      ucp_request_param_t param{};
      ucs_status_ptr_t req = ucp_tag_send_nbx(ep, notice_words_.back().data(), notice_words_.back().size(),
                                              ucx::make_tag(kNoticeGroupId, options_.world_rank, 0), &param);
      if (UCS_PTR_IS_PTR(req)) notice_sends_.push_back(req);
    } catch (...) {  // a peer we cannot reach learns of the failure by itself
    }
  }
  // A notice on a new endpoint (a peer this rank never talked to) needs this worker's progress
  // for the connection: drive them a little now; pstate_shrink's waits drive the rest.
  const auto until = Deadline::Clock::now() + std::chrono::milliseconds(20);
  while (!progress_notices() && Deadline::Clock::now() < until) {
  }
}

bool UcxWorker::progress_notices() noexcept {
  if (worker_ == nullptr || no_progress_) return true;
  // Bounded: toward a host whose link is cut UCX reports progress on every call (it keeps
  // retrying the connection) for tens of seconds, and a notice must never hold its sender.
  for (int i = 0; i < 256 && ucp_worker_progress(worker_) != 0; ++i) {
  }
  for (size_t i = 0; i < notice_sends_.size();) {  // sent notices: free the finished ones
    if (ucp_request_check_status(notice_sends_[i]) == UCS_INPROGRESS) {
      ++i;
      continue;
    }
    ucp_request_free(notice_sends_[i]);
    notice_sends_[i] = notice_sends_.back();
    notice_sends_.pop_back();
  }
  return notice_sends_.empty();
}

namespace {
bool is_member(const std::vector<int> &members, int rank) {
  return rank >= 0 && std::find(members.begin(), members.end(), rank) != members.end();
}
}  // namespace

bool UcxWorker::Notice::decides(const CallPosition *at, bool arrived) const {
  if (at == nullptr) return true;
  const bool sender_member = is_member(at->members, from);
  const bool dead_member = is_member(at->members, dead);
  if (!sender_member && !dead_member) return false;  // another group's failure
  if (!at->in_call()) return true;                    // point-to-point, objects, requests
  if (sender_member) {
    const uint32_t seq = at->begun - 1;
    bool returned = false;
    for (const auto &[group_id, calls] : returned_calls)
      if (group_id == at->group_id) returned = static_cast<int32_t>(calls - seq) > 0;
    if (!returned) return true;  // it gave up on this call, or never reached it
  }
  return dead_member && !arrived;  // a member died while this rank still waits for its part
}

std::optional<UcxWorker::Notice> UcxWorker::take_notice(bool progress, const CallPosition *at, bool arrived) {
  if (worker_ == nullptr || no_progress_) return std::nullopt;
  if (progress) progress_notices();
  for (;;) {  // every notice that arrived joins the held ones, in arrival order
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, ucx::make_tag(kNoticeGroupId, 0, 0),
                                             uint64_t{ucx::kMaxGroupId} << 52, 1, &info);
    if (msg == nullptr) break;
    std::vector<uint8_t> bytes(info.length);
    ucp_request_param_t param = recv_param();
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(worker_, bytes.data(), bytes.size(), msg, &param);
    if (UCS_PTR_IS_ERR(r)) continue;
    if (r != nullptr) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker_);  // local: it arrived
      ucp_request_free(r);
    }
    if (auto n = parse_notice(bytes, ucx::tag_source(info.sender_tag))) held_notices_.push_back(std::move(*n));
  }
  for (auto it = held_notices_.begin(); it != held_notices_.end(); ++it) {
    if (!it->decides(at, arrived)) continue;
    Notice n = std::move(*it);
    held_notices_.erase(it);
    return n;
  }
  return std::nullopt;
}

std::optional<UcxWorker::Notice> UcxWorker::parse_notice(const std::vector<uint8_t> &bytes, int from) const {
  if (bytes.size() < 24) return std::nullopt;  // not a notice of this version
  uint32_t words[4];
  std::memcpy(words, bytes.data(), sizeof words);
  const size_t text_end = 24 + size_t{words[3]};
  if (words[0] != epoch_ || bytes.size() < text_end + 4) return std::nullopt;  // another world's, or torn
  uint32_t groups = 0;
  std::memcpy(&groups, bytes.data() + text_end, 4);
  if (groups > kNoticeMaxGroups || bytes.size() != text_end + 4 + 8 * size_t{groups}) return std::nullopt;
  Notice n;
  n.from = from;
  n.dead = static_cast<int>(words[1]);
  n.status = static_cast<pstate_status_t>(words[2]);
  std::memcpy(&n.unix_ms, bytes.data() + 16, 8);
  n.text.assign(reinterpret_cast<const char *>(bytes.data()) + 24, words[3]);
  for (uint32_t i = 0; i < groups; ++i) {
    uint32_t pair[2];
    std::memcpy(pair, bytes.data() + text_end + 4 + 8 * size_t{i}, 8);
    n.returned_calls.emplace_back(pair[0], pair[1]);
  }
  return n;
}

bool UcxWorker::peer_broken(int world_rank) const {
  auto it = peers_.find(world_rank);
  return it != peers_.end() && (it->second->ep_closed || it->second->lost() || it->second->lost_at.has_value());
}

UcxWorker::Peer &UcxWorker::peer(int world_rank, bool urgent) {
  auto it = peers_.find(world_rank);
  if (it != peers_.end()) return *it->second;
  if (world_rank < 0 || world_rank >= options_.world_size)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "ucx: peer world rank ", world_rank, " is outside 0..",
                options_.world_size - 1);
  PeerEntry entry;
  if (world_rank == options_.world_rank) {
    entry = self_entry();
  } else {
    if (!directory_)
      throw_error(PSTATE_ERR_INVALID_STATE, "ucx: rank ", options_.world_rank, " has no peer directory to reach rank ",
                  world_rank, " (UcxWorker::set_directory was not called)");
    entry = directory_(world_rank, urgent);
  }
  if (entry.address.empty())
    throw_error(PSTATE_ERR_MISMATCH, "ucx: the directory returned no worker address for rank ", world_rank);
  auto p = std::make_unique<Peer>();
  p->worker = this;
  p->world_rank = world_rank;
  p->pid = entry.pid;
  p->host_id = entry.host_id;
  p->same_host = entry.host_id == options_.host_id;
  p->same_process = p->same_host && entry.pid == static_cast<int64_t>(::getpid());
  if (p->same_host && !p->same_process && entry.pid > 0)
    p->watch.emplace(static_cast<pid_t>(entry.pid), options_.watch_with_pidfd);
  p->address = std::move(entry.address);
  Peer &ref = *p;
  peers_.emplace(world_rank, std::move(p));
  return ref;
}

ucp_ep_h UcxWorker::endpoint(Peer &p) {
  if (p.ep != nullptr || p.ep_closed) return p.ep;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t *>(p.address.data());
  // PEER mode only across hosts: it may rule out shared-memory transports, and on this host the
  // process watch detects a dead peer anyway.
  params.err_mode = p.same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  if (!p.same_host) {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_handler.cb = &UcxWorker::on_endpoint_error;
    params.err_handler.arg = &p;
  }
  ucs_status_t st = ucp_ep_create(worker_, &params, &p.ep);
  if (st != UCS_OK) {
    p.ep = nullptr;
    throw_ucx("ucp_ep_create", st, cat("rank ", options_.world_rank, " -> rank ", p.world_rank));
  }
  ++endpoints_created_;
  log_endpoint(p);
  return p.ep;
}

// A receive from a peer we never sent to would otherwise run on the endpoint UCX creates by
// itself when that peer connects (an "internal" endpoint we hold no handle of). A rendezvous
// receive in flight on it cannot be cancelled, and we cannot force-close it: after a link is cut
// mid-transfer, pstate_abort's ucp_worker_destroy then hits UCX's assertion that the endpoint
// has no requests left (ucp_ep.c: proto_reqs not empty) and the process dies. Creating our own
// endpoint to every peer we receive from makes UCX match the peer's connection to it (both sides'
// first endpoint to each other share a connection number), so every transfer runs on an endpoint
// cancel_owner and force_close can close, which fails its requests with UCS_ERR_CANCELED.
void UcxWorker::own_endpoint(Peer &p) {
  try {
    endpoint(p);
  } catch (const Error &) {
    // Cannot create it (out of resources, peer address unusable): the receive still works on
    // UCX's own endpoint; only a forced teardown in the middle of it is at risk.
  }
}

void UcxWorker::log_endpoint(Peer &p) {
  bool first_to_host = logged_hosts_.count(p.host_id) == 0;
  LogLevel level = first_to_host ? LogLevel::kInfo : LogLevel::kTrace;
  if (!options_.logger.enabled(level)) return;
  if (first_to_host) logged_hosts_.insert(p.host_id);
  std::string line = cat("ucx: endpoint to rank ", p.world_rank, p.same_host ? " (same host" : " (other host",
                         p.same_host ? ", error mode none): " : ", error mode peer): ", describe_endpoint_lanes(p.ep));
  if (level == LogLevel::kInfo)
    options_.logger.info(line);
  else
    options_.logger.trace(line);
}

void UcxWorker::connect(int world_rank) {
  if (worker_ == nullptr)
    throw_error(PSTATE_ERR_INVALID_STATE, "ucx: rank ", options_.world_rank, " worker is closed");
  endpoint(peer(world_rank));
}

std::string UcxWorker::describe_endpoint(int world_rank) {
  Peer &p = peer(world_rank);
  ucp_ep_h ep = endpoint(p);
  return ep == nullptr ? std::string("closed") : describe_endpoint_lanes(ep);
}

void UcxWorker::on_endpoint_error(void *arg, ucp_ep_h, ucs_status_t status) {
  auto *p = static_cast<Peer *>(arg);
  p->ep_error = status;
  p->worker->options_.logger.warn("ucx: endpoint to rank ", p->world_rank, " (host ", p->host_id,
                                  ") failed: ", ucs_status_string(status));
}

// ---- posting --------------------------------------------------------------------------------------

UcxWorker::OpId UcxWorker::alloc_op(const OpTarget &target, OpKind kind) {
  if (worker_ == nullptr)
    throw_error(PSTATE_ERR_INVALID_STATE, "ucx: rank ", options_.world_rank, " worker is closed");
  uint32_t index;
  if (!free_ops_.empty()) {
    index = free_ops_.back();
    free_ops_.pop_back();
  } else {
    index = static_cast<uint32_t>(ops_.size());
    ops_.emplace_back();
  }
  Op &op = ops_[index];
  uint32_t generation = op.generation + 1;
  op = Op{};
  op.generation = generation == 0 ? 1 : generation;
  op.kind = kind;
  op.state = OpState::kPending;
  op.target = target;
  return (uint64_t{op.generation} << 32) | index;
}

UcxWorker::Op *UcxWorker::find_op(OpId id) {
  uint32_t index = static_cast<uint32_t>(id);
  uint32_t generation = static_cast<uint32_t>(id >> 32);
  if (index >= ops_.size()) return nullptr;
  Op &op = ops_[index];
  if (op.state == OpState::kFree || op.generation != generation) return nullptr;
  return &op;
}

void UcxWorker::finish_post(Op &op, ucs_status_ptr_t result, size_t immediate_length) {
  if (result == nullptr) {
    op.state = OpState::kDone;
    op.status = UCS_OK;
    op.received = immediate_length;
  } else if (UCS_PTR_IS_ERR(result)) {
    op.state = OpState::kDone;
    op.status = UCS_PTR_STATUS(result);
  } else {
    op.state = OpState::kPending;
    op.request = result;
  }
}

UcxWorker::OpId UcxWorker::post_send(const OpTarget &target, const void *buf, size_t bytes) {
  Peer &p = peer(target.peer_world);
  OpId id = alloc_op(target, OpKind::kSend);
  Op &op = *find_op(id);
  op.send_buf = buf;
  op.bytes = bytes;
  ucp_ep_h ep;
  try {
    ep = endpoint(p);
  } catch (...) {
    release_op(op);
    throw;
  }
  if (ep == nullptr) {  // closed after an earlier error
    finish_post(op, UCS_STATUS_PTR(UCS_ERR_NOT_CONNECTED), 0);
    return id;
  }
  ucp_request_param_t param{};
  finish_post(op, ucp_tag_send_nbx(ep, buf, bytes, target.tag, &param), 0);
  return id;
}

UcxWorker::OpId UcxWorker::post_recv(const OpTarget &target, void *buf, size_t bytes) {
  own_endpoint(peer(target.peer_world));  // watched during the wait; see own_endpoint
  OpId id = alloc_op(target, OpKind::kRecv);
  Op &op = *find_op(id);
  op.recv_buf = buf;
  op.bytes = bytes;
  ucp_request_param_t param = recv_param();
  finish_post(op, ucp_tag_recv_nbx(worker_, buf, bytes, target.tag, ~target.check_mask, &param), 0);
  return id;
}

UcxWorker::OpId UcxWorker::post_recv_upto(const OpTarget &target, void *buf, size_t capacity, size_t *received) {
  OpId id = post_recv(target, buf, capacity);
  Op &op = *find_op(id);
  op.received_out = received;
  if (op.state == OpState::kDone) *received = op.received;
  return id;
}

UcxWorker::OpId UcxWorker::post_recv_any_size(const OpTarget &target, std::vector<uint8_t> *out) {
  own_endpoint(peer(target.peer_world));
  OpId id = alloc_op(target, OpKind::kRecvAnySize);
  Op &op = *find_op(id);
  op.out = out;
  op.state = OpState::kProbing;
  probing_.push_back(static_cast<uint32_t>(id));
  return id;
}

// Matches waiting any-size receives (in posting order) against arrived messages and starts the
// actual receive into a buffer of the probed length.
void UcxWorker::start_probed_recvs() {
  for (size_t i = 0; i < probing_.size();) {
    Op &op = ops_[probing_[i]];
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, op.target.tag, ~op.target.check_mask, 1, &info);
    if (msg == nullptr) {
      ++i;
      continue;
    }
    probing_.erase(probing_.begin() + static_cast<std::ptrdiff_t>(i));
    op.bytes = info.length;
    op.sender_tag = info.sender_tag;
    op.sender_tag_known = true;
    ucp_request_param_t param = recv_param();
    ucs_status_ptr_t r;
    try {
      op.out->resize(info.length);
      r = ucp_tag_msg_recv_nbx(worker_, op.out->data(), info.length, msg, &param);
    } catch (const std::bad_alloc &) {
      // The message is ours now: receive it into nothing (UCX truncates and frees it), fail the op.
      r = ucp_tag_msg_recv_nbx(worker_, nullptr, 0, msg, &param);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
      r = UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
    }
    finish_post(op, r, info.length);
  }
}

// ---- completion, cancellation, release -----------------------------------------------------------

bool UcxWorker::test_op(Op &op) {
  if (op.state == OpState::kDone) return true;
  if (op.state != OpState::kPending) return false;
  ucs_status_t st;
  if (op.kind == OpKind::kSend) {
    st = ucp_request_check_status(op.request);
  } else {
    ucp_tag_recv_info_t info{};
    st = ucp_tag_recv_request_test(op.request, &info);
    if (st == UCS_OK) {
      op.received = info.length;
      if (op.received_out != nullptr) *op.received_out = info.length;
    }
    // UCX fills info once the receive completed, truncated too; any-size receives know the tag
    // from their probe already
    if (st != UCS_INPROGRESS && op.kind == OpKind::kRecv && info.sender_tag != 0) {
      op.sender_tag = info.sender_tag;
      op.sender_tag_known = true;
    }
  }
  if (st == UCS_INPROGRESS) return false;
  op.status = st;
  ucp_request_free(op.request);
  op.request = nullptr;
  op.state = OpState::kDone;
  return true;
}

void UcxWorker::release_op(Op &op) noexcept {
  if (op.state == OpState::kFree) return;
  if (op.request != nullptr) ucp_request_free(op.request);  // freed by UCX once it completes
  op.request = nullptr;
  if (op.state == OpState::kProbing) {
    uint32_t index = static_cast<uint32_t>(&op - ops_.data());
    probing_.erase(std::remove(probing_.begin(), probing_.end(), index), probing_.end());
  }
  op.state = OpState::kFree;
  free_ops_.push_back(static_cast<uint32_t>(&op - ops_.data()));
}

size_t UcxWorker::outstanding(uint32_t owner) const {
  return static_cast<size_t>(std::count_if(ops_.begin(), ops_.end(), [owner](const Op &op) {
    return op.state != OpState::kFree && (owner == 0 || op.target.owner == owner);
  }));
}

void UcxWorker::cancel_owner(uint32_t owner) noexcept {
  if (worker_ == nullptr) return;
  // Receives in the expected queue cancel at once; what does not (sends, rendezvous in flight)
  // gets its endpoint force-closed, which completes its requests with UCS_ERR_CANCELED, so UCX
  // never touches the caller's buffers after this returns.
  std::vector<int> stuck_peers;
  for (Op &op : ops_) {
    if (op.state != OpState::kPending || (owner != 0 && op.target.owner != owner)) continue;
    ucp_request_cancel(worker_, op.request);
    if (!test_op(op)) stuck_peers.push_back(op.target.peer_world);
  }
  for (int rank : stuck_peers) {
    auto it = peers_.find(rank);
    if (it != peers_.end()) close_endpoint(*it->second, true);
  }
  // A receive whose message had started to arrive in fragments (an eager multi-fragment message:
  // UCX tracks it by message, not by endpoint) is neither cancelled nor ended by closing the
  // endpoint: the rest of the message still lands in the caller's buffer at the next progress —
  // a freed scratch buffer once the collective has unwound (heap corruption, seen when a failure
  // notice ended a wait while a live peer was mid-send). The caller's buffers are still alive
  // here, so let such receives finish while their senders live (they are sending now: a few ms).
  // (A dead sender sends no more; what it had sent was delivered by the wait's own progress.)
  auto from_live_sender = [this](const Op &op) {
    return op.kind != OpKind::kSend && peers_.count(op.target.peer_world) != 0 && !peer_lost(op.target.peer_world);
  };
  const auto drain_start = Deadline::Clock::now();
  bool drained = false;
  for (;;) {
    bool waiting_on_live = false;
    for (Op &op : ops_) {
      if (op.state != OpState::kPending || (owner != 0 && op.target.owner != owner) || test_op(op)) continue;
      waiting_on_live = waiting_on_live || from_live_sender(op);
    }
    if (!waiting_on_live || Deadline::Clock::now() >= drain_start + kDrainBudget) break;
    drained = true;
    ucp_worker_progress(worker_);
  }
  if (drained)
    options_.logger.info("ucx: receives from live ranks that had begun to arrive were let finish (",
                         std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - drain_start).count(),
                         " ms) before the failed wait returned");
  for (Op &op : ops_) {
    if (op.state == OpState::kFree || (owner != 0 && op.target.owner != owner)) continue;
    if (op.state == OpState::kPending && !test_op(op)) {
      poisoned_ = true;  // UCX still owns it: the worker is closed by force
      if (from_live_sender(op) && !no_progress_) {
        // ... and its live sender may still write the buffer at any later progress: never again.
        no_progress_ = true;
        options_.logger.info("ucx: a receive from rank ", op.target.peer_world, " (alive) could not be cancelled or ",
                             "finished in ", kDrainBudget.count(), " ms; this UCX worker is not progressed again");
      }
    }
    release_op(op);
  }
}

// ---- teardown -------------------------------------------------------------------------------------

void UcxWorker::close_endpoint(Peer &p, bool force) noexcept {
  if (p.ep == nullptr) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &param);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
  p.ep = nullptr;
  p.ep_closed = true;
}

void UcxWorker::close(Deadline deadline) noexcept {
  if (worker_ == nullptr) return;
  if (stats_.waits > 0)
    options_.logger.info("ucx: waits: ", stats_.waits, " (", stats_.network_waits, " on a peer of another host, next ",
                         "spin budget ", network_spin_us(), " us; ", options_.wait.spin_us, " us on this host), ",
                         stats_.blocked_waits, " slept (", stats_.blocks, " sleeps in poll)");
  cancel_owner(0);
  if (poisoned_) {
    options_.logger.info("ucx: requests were abandoned after an error; closing endpoints by force");
    force_close();
    return;
  }
  std::vector<void *> closing;
  for (auto &[rank, p] : peers_) {
    if (p->ep == nullptr) continue;
    if (p->ep_error != UCS_OK || (p->watch && p->watch->exited())) {
      close_endpoint(*p, true);
      continue;
    }
    ucp_request_param_t param{};  // flush mode: outstanding sends finish first
    ucs_status_ptr_t r = ucp_ep_close_nbx(p->ep, &param);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
    p->ep = nullptr;
    p->ep_closed = true;
  }
  wait_requests(closing, deadline);
  if (!closing.empty())
    options_.logger.warn("ucx: ", closing.size(), " endpoint(s) did not flush before the deadline; dropped");
  for (void *r : closing) ucp_request_free(r);
  destroy_all();
}

// Progresses (then sleeps on the wake-up fd, at most max_block_ms at a time) until every request
// completed or the deadline passed; completed ones are freed and removed from the vector.
void UcxWorker::wait_requests(std::vector<void *> &requests, Deadline deadline) noexcept {
  auto done = [&] {
    requests.erase(std::remove_if(requests.begin(), requests.end(),
                                  [](void *r) {
                                    if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
                                    ucp_request_free(r);
                                    return true;
                                  }),
                   requests.end());
    return requests.empty();
  };
  while (true) {
    progress_until_idle();
    if (done() || deadline.expired()) return;
    if (ucp_worker_arm(worker_) != UCS_OK) continue;  // BUSY: more to progress
    pollfd p{efd_, POLLIN, 0};
    ::poll(&p, 1, std::min(deadline.remaining_ms(), options_.wait.max_block_ms));
  }
}

void UcxWorker::force_close() noexcept {
  if (worker_ == nullptr && context_ == nullptr) return;
  if (worker_ != nullptr) {
    cancel_owner(0);
    for (auto &[rank, p] : peers_) close_endpoint(*p, true);
  }
  destroy_all();
}

void UcxWorker::destroy_all() noexcept {
  for (void *r : notice_sends_) ucp_request_free(r);  // released by UCX once done
  notice_sends_.clear();
  for (Op &op : ops_) release_op(op);
  for (auto &[rank, p] : peers_) {
    if (p->ep != nullptr) close_endpoint(*p, true);
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  worker_ = nullptr;
  efd_ = -1;
  if (context_ != nullptr) ucp_cleanup(context_);
  context_ = nullptr;
  peers_.clear();
  forgotten_peers_.clear();
  probing_.clear();
}

}  // namespace pstate
