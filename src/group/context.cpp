// context.cpp — init_distributed_environment, initialize_model_parallel, destroy_*, abort.
//
// Rendezvous (collective over the world, bounded by its own deadline: PSTATE_INIT_TIMEOUT_MS,
// default 120 s, see launch_env.hpp):
//   1. resolve this rank's launch facts from the parameters and the environment (a rank outside
//      the world still tells the store, so the ranks that wait learn it at once, then fails);
//   2. open the store (rank 0 serves a tcp:// store; the store claims the rank, checks the job
//      token and the world size);
//   3. start the UCX worker and publish "pstate/peer/<rank>" = {local rank given, interfaces named,
//      worker address, pid, host id}; rank 0 gathers them into "pstate/peers", which every rank reads
//      (rank_records.hpp); local ranks nobody gave are derived from the hosts, duplicates refused;
//      a CUDA context whose device ordinal was not known opens its device now; ranks of different
//      hosts that limited UCX to loopback interfaces are refused on every rank, naming both;
//   5. build the world group and run one barrier over UCX: when pstate_init returns, every
//      rank has finished with the store and the transport has carried a message both ways.
// A CUDA context loads CUDA (and NCCL when the world has more than one rank) and checks its
// device before step 2 when it knows the ordinal (device_ordinal or LOCAL_RANK): a host that
// cannot run it fails at once, before any peer sees it.
#include "group/context.hpp"

#include "bootstrap/netif.hpp"
#include "bootstrap/tcp_store.hpp"
#include "bootstrap/wire.hpp"
#include "group/dump_watcher.hpp"
#include "group/group.hpp"
#include "group/host_identity.hpp"
#include "group/host_order.hpp"
#include "group/rank_records.hpp"
#include "transport/ucx/ucx_tag.hpp"

#include <algorithm>
#include <ctime>
#include <unistd.h>
#include <cstdlib>
#include <map>
#include <type_traits>
#include <random>
#include <set>

namespace pstate {

namespace {

std::string random_job_id() {
  std::random_device rd;
  uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Group ids in the UCX tag: 0 is the world; model-parallel groups get 1 + generation * kinds +
// kind, so a group of a re-initialized layout never receives a stale message of an old one. They
// stay below Context::kFirstCustomGroupId: the ids above it belong to pstate_new_group's groups.
uint32_t group_id_for(uint32_t generation, pstate_group_kind_t kind) {
  constexpr uint32_t kGenerations = (Context::kFirstCustomGroupId - 1) / PSTATE_GROUP_KIND_COUNT;
  return 1 + (generation % kGenerations) * PSTATE_GROUP_KIND_COUNT + static_cast<uint32_t>(kind);
}

}  // namespace

Context::Context(const pstate_init_params_t *params) {
  pstate_init_params_t defaults = PSTATE_INIT_PARAMS_INIT;
  const pstate_init_params_t &p = params != nullptr ? *params : defaults;
  launch_ = resolve_launch_env(p, process_environment(), /*defer_rank_range=*/true);
  device_ = p.device;
  log_.set_rank(launch_.rank);
  if (!launch_.rank_out_of_range.empty()) refuse_rank_out_of_range();
  trace_ = make_trace_recorder();
  if (trace_) trace_->set_busy_flag(&busy_);
  if (trace_) trace_->set_facts({"-", launch_.rank, launch_.world_size, device_ == PSTATE_DEVICE_CUDA ? "cuda" : "cpu"});
  const uint64_t life = trace_life(TraceOp::kInit);
  const char *check = std::getenv("PSTATE_CHECK");
  check_ = check != nullptr && check[0] != '\0' && std::string(check) != "0";
  device_ordinal_param_ = p.device_ordinal;
  // Before the store, so it fails fast and alone, unless the ordinal is the local rank that the
  // rendezvous has yet to derive.
  if (device_ == PSTATE_DEVICE_CUDA && (p.device_ordinal >= 0 || launch_.local_rank_given)) open_device(p.device_ordinal);
  try {
    rendezvous();
  } catch (const Error &e) {
    trace_life_end(life, e.status());
    stop_dump_watcher();
    // Once the rank directory is on the store every rank checks the same records and most errors
    // from here on (duplicate local ranks, say) are thrown by every rank: the serving rank keeps
    // the store up, for a short grace, until the others have read the directory and left, so they
    // report that error and not PEER_LOST for a store that vanished under their get.
    if (store_ && directory_published_) store_->close(Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 5000)));
    throw;
  }
  if (trace_) trace_->set_facts({job_id_, launch_.rank, launch_.world_size, device_ == PSTATE_DEVICE_CUDA ? "cuda" : "cpu"});
  trace_life_end(life, PSTATE_OK);
}

// ---- the flight recorder's lifecycle steps and dumps ----

uint64_t Context::trace_life(TraceOp op) {
  if (!trace_) return 0;
  return trace_->begin(TraceClass::kLife, op, world_ ? trace_->world_group() : nullptr, UINT64_MAX, UINT64_MAX, -1, -1,
                       -1, -1, TracePath::kNone);
}

void Context::trace_life_end(uint64_t id, pstate_status_t status) {
  if (!trace_ || id == 0) return;
  if (status == PSTATE_OK) trace_->completed(id);
  else trace_->failed(id, status);
}

template <typename F>
auto Context::traced_life(TraceOp op, F &&f) -> decltype(f()) {
  const uint64_t id = trace_life(op);
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      trace_life_end(id, PSTATE_OK);
    } else {
      auto out = f();
      trace_life_end(id, PSTATE_OK);
      return out;
    }
  } catch (const Error &e) {
    trace_life_end(id, e.status());
    throw;
  } catch (...) {
    trace_life_end(id, PSTATE_ERR_INTERNAL);
    throw;
  }
}

void Context::trace_call_failed(uint64_t id, const Error &e) noexcept {
  if (!trace_) return;
  const pstate_status_t s = e.status();
  if (id != 0) trace_->failed(id, s);
  const bool dumpable = s == PSTATE_ERR_TIMEOUT || s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_MISMATCH ||
                        s == PSTATE_ERR_ABORTED;
  if (!dumpable || (s == PSTATE_ERR_ABORTED && dumped_since_failure_)) return;
  if (state_ == State::kFailed) dumped_since_failure_ = true;
  std::string error;
  std::string file = trace_->dump_noexcept(cat("a call failed: ", e.what()), &error);
  if (file.empty()) log_.warn("flight recorder: the dump after this failure could not be written: ", error);
  else log_.info("flight recorder: dump written to ", file, " (read the job's dumps with: pstate doctor ", trace_->dir(), ")");
}

std::string Context::trace_dump(const char *path) {
  if (!trace_)
    throw_error(PSTATE_ERR_UNSUPPORTED, "pstate_trace_dump: the flight recorder is off (PSTATE_TRACE_ENTRIES=0): unset it, or set it to the number of entries to keep");
  return trace_->dump("pstate_trace_dump", path != nullptr ? path : "");
}

uint32_t Context::world_group_id(uint32_t generation) { return group_id_for(generation, PSTATE_GROUP_WORLD); }

std::vector<int> Context::shrink() {
  return traced_life(TraceOp::kShrink, [&] { return shrink_now(); });
}
int Context::grow(int64_t timeout_ms) {
  return traced_life(TraceOp::kGrow, [&] { return grow_now(timeout_ms); });
}

void Context::initialize_model_parallel(const pstate_parallel_config_t *cfg) {
  traced_life(TraceOp::kInitializeModelParallel, [&] { initialize_model_parallel_now(cfg); });
}
void Context::destroy_model_parallel() {
  traced_life(TraceOp::kDestroyModelParallel, [&] { destroy_model_parallel_now(); });
}
void Context::finalize() {
  traced_life(TraceOp::kFinalize, [&] { finalize_now(); });
}
void *Context::begin_graph_capture(void *stream) {
  return traced_life(TraceOp::kGraphCaptureBegin, [&] { return begin_graph_capture_now(stream); });
}
void Context::end_graph_capture() {
  traced_life(TraceOp::kGraphCaptureEnd, [&] { end_graph_capture_now(); });
}

void Context::open_device(int device_ordinal) {
  DeviceContextOptions o;
  o.device_ordinal = device_ordinal >= 0 ? device_ordinal : launch_.local_rank;
  o.load_nccl = launch_.world_size > 1;  // a world of one never makes an NCCL communicator
  o.timeout_ms = launch_.timeout_ms;
  o.socket_ifname = launch_.socket_ifname;
  o.abort_requested = &abort_requested_;
  try {
    device_ctx_ = make_cuda_device_context(o, log_);
    const char *events = std::getenv("PSTATE_TRACE_CUDA_EVENTS");
    if (trace_ && events != nullptr && std::string(events) == "1") {
      device_ctx_->enable_trace_events();
      DeviceContext *dc = device_ctx_.get();
      trace_->set_device_times([dc](uint64_t id, int64_t *s, int64_t *e) { return dc->trace_times(id, s, e); });
    }
  } catch (const Error &e) {
    throw Error(e.status(), cat("CUDA context of rank ", launch_.rank, " (cuda:", o.device_ordinal, "): ", e.what()));
  }
}

Context::~Context() { abort(); }

// This process was started as a rank of the job with a rank the world does not have. The other
// ranks would wait for the rank that is missing because of it until their deadline: the store
// hears of it first (its refusal of this claim fails the job at once), then this rank fails.
void Context::refuse_rank_out_of_range() {
  bool told = false;
  try {
    StoreOptions o = launch_.store_options();
    o.serve = false;
    o.timeout_ms = std::min<int64_t>(o.timeout_ms, 2000);
    Logger quiet(LogLevel::kNone);
    open_store(o, quiet);
  } catch (const Error &e) {
    told = e.status() == PSTATE_ERR_MISMATCH;
  }
  throw_error(PSTATE_ERR_INVALID_ARGUMENT, launch_.rank_out_of_range,
              told ? "; the store was told, so the other ranks stop waiting" : "");
}

void Context::rendezvous() {
  Deadline deadline = Deadline::after_ms(launch_.init_timeout_ms);
  log_.info("init: ", launch_.describe());
  try {
    store_ = open_store(launch_.store_options(), log_);
    log_.info("init: store ", store_->describe(), " open");
    start_dump_watcher();  // from here on a rank waiting in the rendezvous dumps on request too
    // Host awareness, opt-in: renumber ranks host by host before anything uses the rank (the
    // store claim above keeps the launcher's rank; launcher rank 0 stays rank 0).
    if (order_ranks_by_host_from_env() && !launch_.rejoin) order_ranks_by_host(deadline);
    if (!launch_.socket_ifname.empty()) {  // multi-host runs: say which network the job uses
      InterfaceAddress store_if = launch_.store.kind == InitMethod::Kind::kTcp
                                      ? interface_toward(launch_.socket_ifname, launch_.store.host)
                                      : select_interfaces(launch_.socket_ifname).front();
      log_.info("init: interface ", store_if.name, " address ", store_if.ipv4,
                " carries the store connection; UCX TCP uses ",
                describe_interfaces(select_interfaces(launch_.socket_ifname)),
                " (PSTATE_SOCKET_IFNAME=", launch_.socket_ifname, ")");
    }
    rendezvous_with_store(deadline);
  } catch (const Error &e) {
    bool told = std::string_view(e.what()).rfind(wire::kJobFailedPrefix, 0) == 0;  // by another rank: said already
    Error out = e.status() != PSTATE_ERR_TIMEOUT || told
                    ? e
                    : Error(e.status(), cat(e.what(), " [the rendezvous' deadline: ", launch_.init_timeout_ms,
                                            " ms, from ", launch_.init_timeout_origin, "]"));
    // The ranks that wait for this one hear why it gave up, at once, instead of at their deadline.
    if (store_) store_->abandon(out.status(), out.what());
    throw out;
  }
}

void Context::start_dump_watcher() {
  auto *tcp = dynamic_cast<TcpStore *>(store_.get());
  // file:// stores: dumps on failures, pstate_trace_dump, SIGUSR1 (opt-in)
  if (!trace_ || (tcp == nullptr && launch_.store.kind != InitMethod::Kind::kEtcd)) return;
  InitMethod method = launch_.store;
  if (tcp) method.port = tcp->port();  // the port actually served (a serving rank 0 may have asked for 0)
  StoreOptions o = launch_.store_options();
  o.timeout_ms = std::min<int64_t>(o.timeout_ms, 10000);
  try {
    // A replacement answers only the requests made from now on (dump_watcher.hpp); a rank of a
    // new job every one, and its watcher costs this init no store traffic.
    const int64_t first = launch_.rejoin ? store_->add(DumpWatcher::kCountKey, 0, Deadline::after_ms(o.timeout_ms)) + 1 : 1;
    dump_watcher_ = std::make_unique<DumpWatcher>(o, method, *trace_, log_, first);
  } catch (const std::exception &e) {  // the store's refusal, or no thread
    log_.info("flight recorder: no dumps on request through the store (", e.what(), ")");
  }
}

void Context::stop_dump_watcher() noexcept {
  if (dump_watcher_) dump_watcher_->stop();
}

std::unique_ptr<UcxWorker> Context::make_worker() const {
  UcxWorkerOptions wo;
  wo.world_rank = launch_.rank;
  wo.world_size = launch_.world_size;
  wo.host_id = this_host_identity();
  wo.socket_ifname = launch_.socket_ifname;
  wo.default_timeout_ms = launch_.timeout_ms;
  wo.wait = wait_policy_for_host(launch_.local_world_size > 0 ? launch_.local_world_size : launch_.world_size);
  // PSTATE_NETWORK_SPIN_US: the ceiling of the spin of waits on another host (WaitPolicy); 0 turns
  // the network sizing off (such waits spin as same-host ones: what bench/across_hosts.sh compares).
  if (const char *net = std::getenv("PSTATE_NETWORK_SPIN_US"); net != nullptr && *net != '\0') {
    char *end = nullptr;
    const long us = std::strtol(net, &end, 10);
    if (*end != '\0' || us < 0 || us > 100000)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_NETWORK_SPIN_US='", net,
                  "' is not a number of microseconds in 0..100000 (the spin ceiling of waits on another host)");
    wo.wait.network_spin_max_us = wo.wait.spin_us > 0 ? static_cast<int>(us) : 0;
  }
  wo.logger = log_;
  auto worker = std::make_unique<UcxWorker>(std::move(wo));
  worker->set_abort_flag(&abort_requested_);
  worker->set_departed_flags(departed_.get(), departed_ ? launch_.world_size : 0);
  return worker;
}

void Context::rendezvous_with_store(Deadline deadline) {
  // A store that watches its ranks' leases (etcd) marks the departed for the UCX waits.
  departed_ = std::make_unique<std::atomic<bool>[]>(static_cast<size_t>(launch_.world_size));
  for (int r = 0; r < launch_.world_size; ++r) departed_[static_cast<size_t>(r)].store(false);
  store_->watch_departures([flags = departed_.get(), n = launch_.world_size, self = launch_.rank](int r, bool gone) {
    if (r >= 0 && r < n && r != self) flags[r].store(gone, std::memory_order_release);
  });
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    worker_ = make_worker();
  }
  log_.info("init: UCX worker up: ", worker_->describe_transports());
  if (launch_.rejoin) return join_as_replacement(deadline);  // shrink.cpp: admitted by pstate_grow

  exchange_peers(deadline);
  check_interfaces_reach();
  settle_local_ranks();
  if (device_ == PSTATE_DEVICE_CUDA && !device_ctx_) open_device(device_ordinal_param_);  // its ordinal is known now
  worker_->set_directory([this](int r, bool urgent) { return peer_entry(r, urgent); });

  std::vector<int> all(static_cast<size_t>(launch_.world_size));
  for (int r = 0; r < launch_.world_size; ++r) all[static_cast<size_t>(r)] = r;
  members_ = all;
  rank_ = launch_.rank;
  world_ = make_group(PSTATE_GROUP_WORLD, 0, all, 0);
  world_->barrier(/*allow_shm=*/false);
  log_.info("init: world group of ", launch_.world_size, " ranks ready (job ", job_id_, ")");
  log_counts("pstate_init");
}

void Context::log_counts(const char *phase, const std::string &detail) const {
  StoreTraffic t = store_ ? store_->traffic() : StoreTraffic{};
  timespec cpu{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
  const auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - created_);
  log_.info("counts after ", phase, ": store ", describe_traffic(t), "; ucx endpoints ",
            worker_ ? worker_->endpoints_created() : 0, " peers ", worker_ ? worker_->peers_known() : 0,
            "; wall_ms ", wall.count(), " cpu_ms ", cpu.tv_sec * 1000 + cpu.tv_nsec / 1000000, detail);
}

// Every rank publishes its record; after a store barrier rank 0 reads each and publishes the
// compact directory (no addresses) that the others read in one get, and each rank's first peers'
// whole records (rank_records.hpp: O(1) requests per rank, O(world) bytes without the addresses).
void Context::exchange_peers(Deadline deadline) {
  RankRecord mine{
      launch_.local_rank_given ? launch_.local_rank : -1,
      launch_.socket_ifname.empty() ? std::string() : describe_interfaces(select_interfaces(launch_.socket_ifname)),
      worker_->self_entry()};
  Rendezvous rv = exchange_rank_records(*store_, launch_.rank, launch_.world_size, encode_rank_record(mine),
                                        launch_.rank == 0 ? random_job_id() : std::string(), deadline,
                                        world_barrier_peers);
  directory_published_ = launch_.rank == 0;
  adopt_directory(decode_rank_directory(rv.directory), "init: the rank directory on the store");
  peers_.at(static_cast<size_t>(launch_.rank)).address = mine.peer.address;
  address_on_store_.at(static_cast<size_t>(launch_.rank)) = 0;
  for (auto &[r, rec] : rv.first) take_address(r, std::move(rec.peer), "init: the first peers' records");
}

// The address of `from`, rank r's entry as read from the store, becomes r's, once its host and pid
// are the directory's (else MISMATCH naming `source`: another job's record under the same prefix).
void Context::take_address(int r, PeerEntry &&from, const std::string &source) {
  PeerEntry &p = peers_.at(static_cast<size_t>(r));
  if (from.host_id != p.host_id || from.pid != p.pid)
    throw_error(PSTATE_ERR_MISMATCH, "rank ", launch_.rank, ": rank ", r, "'s record in ", source, " (host ",
                host_identity_name(from.host_id), ", pid ", from.pid, ") differs from the rank directory's (host ",
                host_identity_name(p.host_id), ", pid ", p.pid, "): two jobs share this store prefix?");
  p.address = std::move(from.address);
  address_on_store_.at(static_cast<size_t>(r)) = 0;
}

void Context::adopt_directory(RankDirectory d, const char *what) {
  if (d.ranks.size() != static_cast<size_t>(launch_.world_size))
    throw_error(PSTATE_ERR_MISMATCH, what, " lists ", d.ranks.size(), " ranks, not ", launch_.world_size,
                " (a store of another job?)");
  std::lock_guard<std::mutex> lock(peers_mutex_);
  job_id_ = d.job_id;
  peers_.clear();
  given_local_ranks_.clear();
  interfaces_.clear();
  for (RankRecord &rec : d.ranks) {
    given_local_ranks_.push_back(rec.local_rank);
    interfaces_.push_back(std::move(rec.interfaces));
    peers_.push_back(std::move(rec.peer));
  }
  address_on_store_.assign(peers_.size(), d.addresses_on_store ? 1 : 0);
}

PeerEntry Context::peer_entry(int world_rank, bool urgent) {
  std::lock_guard<std::mutex> lock(peers_mutex_);
  PeerEntry &p = peers_.at(static_cast<size_t>(world_rank));
  if (!p.address.empty() || !address_on_store_.at(static_cast<size_t>(world_rank))) return p;
  // A failure notice (urgent) never reads the store one peer at a time: fail() has read, in one
  // batch, the addresses its notices need. No address returned: the worker skips that peer.
  if (urgent) return p;
  const std::string key = rank_record_key(world_rank);
  RankRecord rec;
  try {
    rec = decode_rank_record(store_->get(key, Deadline::after_ms(timeout_ms())));
  } catch (const Error &e) {
    throw_error(e.status(), "rank ", launch_.rank, ": reading rank ", world_rank, "'s UCX address from the store (",
                key, ") to connect to it for the first time: ", e.what());
  }
  take_address(world_rank, std::move(rec.peer), cat("the store (", key, ")"));
  return p;
}

namespace {

// "lo 127.0.0.1" or "lo 127.0.0.1, lo2 127.0.0.2": every address is loopback.
bool only_loopback(const std::string &interfaces) {
  if (interfaces.empty()) return false;
  size_t at = 0;
  while (at < interfaces.size()) {
    size_t end = interfaces.find(", ", at);
    std::string item = interfaces.substr(at, end == std::string::npos ? std::string::npos : end - at);
    size_t space = item.rfind(' ');
    if (space == std::string::npos || !is_loopback_ipv4(item.substr(space + 1))) return false;
    if (end == std::string::npos) break;
    at = end + 2;
  }
  return true;
}

}  // namespace

// A rank whose named interfaces are all loopback advertises UCX addresses no other host can
// reach; UCX would fail later with "Destination is unreachable" on whichever rank tried first.
// Every rank sees the same directory, so every rank reports the same pair, at once.
void Context::check_interfaces_reach() const {
  for (int a = 0; a < launch_.world_size; ++a) {
    const std::string &ia = interfaces_[static_cast<size_t>(a)];
    if (!only_loopback(ia)) continue;
    for (int b = 0; b < launch_.world_size; ++b) {
      if (peers_[static_cast<size_t>(b)].host_id == peers_[static_cast<size_t>(a)].host_id) continue;
      const std::string &ib = interfaces_[static_cast<size_t>(b)];
      throw_error(PSTATE_ERR_TRANSPORT, "rank ", a, " (host ",
                  host_identity_name(peers_[static_cast<size_t>(a)].host_id),
                  ") limits its sockets to loopback interfaces (", ia, "), which rank ", b, " (host ",
                  host_identity_name(peers_[static_cast<size_t>(b)].host_id), ", ",
                  ib.empty() ? std::string("no interface named") : "interfaces " + ib,
                  ") cannot reach: set PSTATE_SOCKET_IFNAME on every rank to the interfaces of the network between "
                  "the hosts (e.g. eth0, or ^lo for all but loopback)");
    }
  }
}

// Every rank's local rank: what its launcher gave or, where nothing did, its index among the ranks
// of its host in rank order (logged at INFO). Two ranks of one host ending with the same local
// rank would share a GPU: MISMATCH on every rank of that host, naming both and where each value
// came from. Reads only the directory: no store traffic.
void Context::settle_local_ranks() {
  const std::string &my_host = peers_[static_cast<size_t>(launch_.rank)].host_id;
  std::vector<int> on_host;  // the host's ranks, in rank order
  for (int r = 0; r < launch_.world_size; ++r)
    if (peers_[static_cast<size_t>(r)].host_id == my_host) on_host.push_back(r);
  auto origin = [&](int r, int value) {
    return given_local_ranks_[static_cast<size_t>(r)] >= 0 ? cat("rank ", r, " has LOCAL_RANK ", value)
                                                           : cat("rank ", r, " has none (derived ", value, ")");
  };
  std::map<int, int> holder;  // local rank -> the rank of this host that has it
  for (size_t i = 0; i < on_host.size(); ++i) {
    int r = on_host[i], given = given_local_ranks_[static_cast<size_t>(r)];
    int value = given >= 0 ? given : static_cast<int>(i);
    auto [it, added] = holder.emplace(value, r);
    if (!added) {
      int other = it->second;
      if (given_local_ranks_[static_cast<size_t>(other)] >= 0 && given >= 0)
        throw_error(PSTATE_ERR_MISMATCH, "ranks ", other, " and ", r, " on host ", host_identity_name(my_host),
                    " both have local_rank ", value, ": give each rank of a host its own LOCAL_RANK");
      throw_error(PSTATE_ERR_MISMATCH, "ranks ", other, " and ", r, " on host ", host_identity_name(my_host),
                  " would both have local_rank ", value, " (", origin(other, value), ", ", origin(r, value),
                  "): set LOCAL_RANK on every rank of a host, or on none (pstate then numbers them in rank order)");
    }
  }
  if (!launch_.local_rank_given) {
    auto at = std::find(on_host.begin(), on_host.end(), launch_.rank);
    launch_.local_rank = static_cast<int>(at - on_host.begin());
    if (launch_.local_world_size < 0) launch_.local_world_size = static_cast<int>(on_host.size());
    log_.info("init: local rank ", launch_.local_rank, " of ", on_host.size(), " on host ", host_identity_name(my_host),
              " (no LOCAL_RANK or local_rank parameter: the rank's place among the host's ranks, in rank order)");
  }
  if (launch_.local_rank >= static_cast<int>(on_host.size()))
    log_.warn("init: local_rank ", launch_.local_rank, " but only ", on_host.size(), " ranks run on host ",
              host_identity_name(my_host), " (is LOCAL_RANK right?)");
}

std::unique_ptr<Group> Context::make_group(pstate_group_kind_t kind, size_t index, const std::vector<int> &ranks,
                                           uint32_t group_id) {
  auto g = std::make_unique<Group>(*this, kind, index, ranks, group_id);
  log_.info("group ", g->name(), ": ", ranks.size(), " ranks, rank_in_group ", g->rank_in_group());
  return g;
}

void Context::require_not_capturing(const char *call) const {
  if (capturing())
    throw_error(PSTATE_ERR_INVALID_STATE, call, " in graph-capture mode: the groups' NCCL communicators may be "
                "recorded into the graph; call pstate_graph_capture_end first");
}

namespace {

constexpr size_t kConfigFields = 8;
using ConfigWire = std::array<int32_t, kConfigFields>;
constexpr std::array<const char *, kConfigFields> kConfigNames = {"tp", "pp", "ep", "attn_dp", "attn_cp", "moe_dp",
                                                                 "dcp", "shared_experts_tp"};

ConfigWire to_wire(const layout::ParallelConfig &c) {
  return {c.tp, c.pp, c.ep, c.attn_dp, c.attn_cp, c.moe_dp, c.dcp, c.shared_experts_tp};
}

// "rank 0 tp 1 pp 2, rank 1 tp 2 pp 1": tp and pp always, the other sizes where the two differ.
std::string describe_config_pair(int ra, const ConfigWire &a, int rb, const ConfigWire &b) {
  std::string sa = cat("rank ", ra), sb = cat("rank ", rb);
  for (size_t i = 0; i < kConfigFields; ++i) {
    if (i >= 2 && a[i] == b[i]) continue;
    sa += cat(" ", kConfigNames[i], " ", a[i]);
    sb += cat(" ", kConfigNames[i], " ", b[i]);
  }
  return sa + ", " + sb;
}

}  // namespace

// One all_gather of the eight sizes over the world group: every rank sees every rank's config
// and so every rank throws the same MISMATCH when any two differ (a rank that went on alone would
// build groups its peers never join, and its first TP collective would hang or mix data).
// The context stays as it was (kReady): finalize, abort or a second, agreeing call all work.
void Context::require_same_parallel_config(const layout::ParallelConfig &pc) {
  ConfigWire mine = to_wire(pc);
  std::vector<ConfigWire> all(static_cast<size_t>(world_size()));
  // In shared memory, like every world call: its descriptor rides in the segment's flag words, so a
  // rank in a user's collective gets MISMATCH naming this exchange (test_no_wrong_answer). Over UCX
  // without an exchange it was faster at 64 oversubscribed ranks (the segment's creation is met by
  // every process of the host) but a mismatch became a TIMEOUT: BENCHMARKS.md "Start-up counted".
  world_->all_gather(mine.data(), all.data(), kConfigFields, PSTATE_INT32, OpKind::kModelParallelConfig);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    throw_error(PSTATE_ERR_MISMATCH, "pstate_initialize_model_parallel: the ranks disagree about the parallel config (",
                describe_config_pair(0, all[0], static_cast<int>(r), all[r]), "; this is rank ", rank(),
                "): every rank must pass the same pstate_parallel_config_t; nothing was created, the context is "
                "still usable");
  }
}

void Context::initialize_model_parallel_now(const pstate_parallel_config_t *cfg) {
  require_usable("pstate_initialize_model_parallel");
  require_not_capturing("pstate_initialize_model_parallel");
  if (layout_)
    throw_error(PSTATE_ERR_INVALID_STATE,
                "model parallel is already initialized: call pstate_destroy_model_parallel first");
  // The sizes with pstate.h's defaults applied (0 = default), so that ranks compare what they
  // mean: tp 0 and tp 2 agree on 4 ranks with pp 2. A default that cannot be applied (tp 0 with a
  // pp that does not divide the world) takes part in the agreement as given, then fails.
  layout::ParallelConfig pc = cfg != nullptr ? layout::ParallelConfig::fields_of(*cfg)
                                             : layout::ParallelConfig::tensor_parallel_only(world_size());
  std::optional<Error> no_default;
  try {
    pc = pc.with_defaults(world_size());
  } catch (const Error &e) {
    no_default = e;
  }
  using MpClock = std::chrono::steady_clock;
  const auto mp_start = MpClock::now();
  auto ms_since = [](MpClock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(MpClock::now() - t).count();
  };
  require_same_parallel_config(pc);  // before validating it: a rank with a bad config fails with the others
  const auto agreed_ms = ms_since(mp_start);
  if (no_default) throw *no_default;
  layout::Layout lay(world_size(), pc);
  ++generation_;
  std::map<pstate_group_kind_t, Group *> canonical_groups;
  for (pstate_group_kind_t kind : layout::creation_order()) {
    if (kind == PSTATE_GROUP_WORLD || !lay.has(kind)) continue;
    pstate_group_kind_t canon = lay.canonical(kind);
    if (canon != kind) continue;  // aliases are filled below
    size_t index = lay.group_of(kind, rank());
    std::vector<int> launch_ranks;
    for (int g : lay.group_ranks(kind, index)) launch_ranks.push_back(launch_rank_of(g));
    groups_.push_back(make_group(kind, index, launch_ranks, group_id_for(generation_, kind)));
    canonical_groups[kind] = groups_.back().get();
  }
  by_kind_.fill(nullptr);
  by_kind_[PSTATE_GROUP_WORLD] = world_.get();
  for (int k = 1; k < PSTATE_GROUP_KIND_COUNT; ++k) {
    auto kind = static_cast<pstate_group_kind_t>(k);
    if (lay.has(kind)) by_kind_[static_cast<size_t>(k)] = canonical_groups.at(lay.canonical(kind));
  }
  layout_.emplace(std::move(lay));
  state_ = State::kParallel;
  // With the world's NCCL communicator in place, every group of more than one rank
  // gets its own by splitting it, kind by kind in creation order (the same on every rank; the
  // groups of one kind have one size), instead of a bootstrap each on first use.
  if (split_from_world())
    for (const auto &g : groups_)
      if (g->size() > 1) split_from_world_into(g.get());
  warn_tensor_parallel_across_hosts();  // host awareness: allowed, but said (host_order.cpp)
  const auto groups_ms = ms_since(mp_start);
  // Every rank leaves together, so the first collective on any group finds its peers ready.
  world_->barrier(true, OpKind::kModelParallelReady);
  const auto barrier_ms = ms_since(mp_start);
  log_.info("initialize_model_parallel: tp ", pc.tp, " pp ", pc.pp, " ep ", pc.ep, " attn_dp ", pc.attn_dp,
            " attn_cp ", pc.attn_cp, " moe_dp ", pc.moe_dp, " dcp ", pc.dcp, ": ", groups_.size(),
            " groups created");
  log_counts("initialize_model_parallel", cat(" (config agreement ", agreed_ms, " ms, groups ", groups_ms - agreed_ms,
                                              " ms, ready barrier ", barrier_ms - groups_ms, " ms)"));
}

// The groups pstate_destroy_model_parallel retires: the model-parallel ones and the custom ones.
std::vector<Group *> Context::retiring_groups() const {
  std::vector<Group *> all;
  for (const auto &g : groups_) all.push_back(g.get());
  for (const auto &g : custom_groups_) all.push_back(g.get());
  return all;
}

void Context::refuse_pending_requests() const {
  for (Group *g : retiring_groups())
    if (size_t n = g->pending_requests(); n != 0)
      throw_error(PSTATE_ERR_INVALID_STATE, "group ", g->name(), " has ", n, " point-to-point request", n == 1 ? "" : "s",
                  " pending (pstate_isend/pstate_irecv): complete ", n == 1 ? "it" : "them",
                  " with pstate_wait or pstate_test first (nothing was destroyed), or end the context with "
                  "pstate_finalize / pstate_abort, which cancel pending requests");
}

void Context::destroy_model_parallel_now() {
  if (state_ == State::kClosed) throw_error(PSTATE_ERR_INVALID_STATE, "the context is finalized");
  if (!layout_ && custom_calls_live_ > 0) {  // only custom groups (pstate_new_group) to drop
    require_not_capturing("pstate_destroy_model_parallel");
    refuse_pending_requests();
    drop_undelivered(retiring_groups(), "pstate_destroy_model_parallel");
    retire_custom_groups();
    log_.info("destroy_model_parallel: custom groups released");
    return;
  }
  if (!layout_)
    throw_error(PSTATE_ERR_INVALID_STATE,
                "model parallel is not initialized: call pstate_initialize_model_parallel first");
  require_not_capturing("pstate_destroy_model_parallel");
  refuse_pending_requests();
  drop_undelivered(retiring_groups(), "pstate_destroy_model_parallel");
  for (auto &g : groups_) {
    g->retire();
    retired_.push_back(std::move(g));
  }
  groups_.clear();
  retire_custom_groups();
  by_kind_.fill(nullptr);
  layout_.reset();
  if (state_ == State::kParallel) state_ = State::kReady;
  log_.info("destroy_model_parallel: groups released");
}

Group *Context::group(pstate_group_kind_t kind) {
  require_usable("pstate_get_group");
  if (kind == PSTATE_GROUP_WORLD) return world_.get();
  if (!layout_)
    throw_error(PSTATE_ERR_INVALID_STATE, "group ", pstate_group_kind_name(kind),
                ": model parallel is not initialized; call pstate_initialize_model_parallel first");
  Group *g = by_kind_[static_cast<size_t>(kind)];
  if (g == nullptr)
    throw_error(PSTATE_ERR_UNSUPPORTED, "group ", pstate_group_kind_name(kind), " does not exist in this layout (",
                kind == PSTATE_GROUP_DCP ? "set decode_context_parallel_size > 1" : "set shared_experts_tensor_parallel_size > 1",
                ")");
  return g;
}

// The failure itself reaches the caller as the failing call's error, so it is said once, there;
// the log repeats it only at INFO (PSTATE_DEBUG=INFO), for the trail of lifecycle events.
void Context::fail(const std::string &why) {
  if (state_ == State::kFailed || state_ == State::kClosed) return;
  state_ = State::kFailed;
  failure_ = why;
  dumped_since_failure_ = false;
  if (trace_) trace_->set_failure(why);
  log_.info("context failed: ", why, " — further collectives return PSTATE_ERR_ABORTED; call pstate_abort");
}

void Context::fail(const std::string &why, pstate_status_t status) {
  const bool first = state_ != State::kFailed && state_ != State::kClosed;
  fail(why);
  if (first) failure_status_ = status;
  // Every peer hears it at once, with the cause, unless the failure is itself a peer's notice: a
  // rank that gave up (a timeout, a mismatch only it could see, no memory for a segment its
  // peers wait on, an interruption) must not leave them waiting for it until their deadline, nor
  // let a late peer complete the call it gave up on (issue 27).
  if (first && worker_ && why.find(ucx::kNoticeMarker) == std::string::npos) {
    read_addresses_for_notices(status);
    worker_->post_notices(members_, -1, status, why, calls_returned());
  }
}

// Where this rank's collectives stood, for its notices: per live group, the calls that returned
// (a peer inside one of those calls completes it; the notice decides only the calls after).
std::vector<std::pair<uint32_t, uint32_t>> Context::calls_returned() const {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  try {
    for (const Group *g : live_groups()) out.emplace_back(g->group_id(), g->calls_returned());
  } catch (...) {  // no memory: the notice decides whatever its receivers wait for, as before
    out.clear();
  }
  return out;
}

// The notices of a death (PEER_LOST) go to every member, over new endpoints where needed (the
// hosts stay reachable); those of any other failure, which may be a cut network, to this host's
// members and over endpoints already open (UcxWorker::post_notices). The members among those
// whose address this rank never read (rank_records.hpp) are read here in one pipelined batch,
// bounded to 1 s; if the store does not answer, those peers learn of the failure by themselves.
void Context::read_addresses_for_notices(pstate_status_t status) noexcept {
  try {
    std::lock_guard<std::mutex> lock(peers_mutex_);
    if (!store_ || address_on_store_.empty()) return;
    const std::string &my_host = peers_.at(static_cast<size_t>(launch_.rank)).host_id;
    std::vector<int> ranks;
    std::vector<std::string> keys;
    for (int r : members_) {
      const PeerEntry &p = peers_.at(static_cast<size_t>(r));
      if (!address_on_store_.at(static_cast<size_t>(r)) || !p.address.empty()) continue;
      if (status != PSTATE_ERR_PEER_LOST && p.host_id != my_host) continue;
      ranks.push_back(r);
      keys.push_back(rank_record_key(r));
    }
    if (keys.empty()) return;
    std::vector<Bytes> values = store_->get_many(keys, Deadline::after_ms(std::min<int64_t>(timeout_ms(), 1000)));
    for (size_t i = 0; i < ranks.size(); ++i)
      take_address(ranks[i], std::move(decode_rank_record(values[i]).peer), "the store (for a failure notice)");
  } catch (...) {  // the notices go where addresses are known
  }
}

// A notice waits (check_notices): take it; one of another epoch is dropped, one of a later call
// is held for it (UcxWorker::take_notice), and the call goes on.
void Context::throw_waiting_notice(const std::string &group, const char *op, const char *self,
                                   const CallPosition *at) {
  if (auto n = worker_->take_notice(/*progress=*/false, at))
    throw UcxWorker::notice_error(*n, cat(group, " ", op), cat("rank ", rank(), " (", self, ")"), global_rank_of(n->from));
}

void Context::check_notices(const std::string &where, const char *self, const CallPosition *at) {
  if (!worker_ || worker_->closed()) return;
  if (auto n = worker_->take_notice(true, at))
    throw UcxWorker::notice_error(*n, where, cat("rank ", rank(), " (", self, ")"), global_rank_of(n->from));
}

void Context::set_interrupt_check(pstate_interrupt_fn fn, void *user) {
  interrupt_fn_ = fn;
  interrupt_user_ = fn != nullptr ? user : nullptr;
  if (worker_) worker_->set_interrupt_check(fn != nullptr ? std::function<bool()>([this] { return interrupted(); }) : nullptr);
}

void Context::request_abort() noexcept {
  if (abort_requested_.exchange(true, std::memory_order_acq_rel)) return;
  std::lock_guard<std::mutex> lock(wake_mutex_);
  if (worker_) worker_->signal();  // a UCX wait asleep in poll() wakes and reads the flag
  if (store_) store_->interrupt();  // a store wait (shrink, grow, live ranks) ends with ABORTED
}

void Context::throw_abort_requested(const std::string &where) const {
  throw_error(PSTATE_ERR_ABORTED, where, " on rank ", rank_, ": ", kAbortedByAnotherThread,
              "; only pstate_abort or pstate_finalize may follow");
}

void Context::require_usable(const char *call) const {
  if (abort_requested()) throw_abort_requested(call);
  if (state_ == State::kFailed)
    throw_error(PSTATE_ERR_ABORTED, call, " refused: this context failed earlier (", failure_,
                "); call pstate_abort or pstate_finalize");
  if (state_ == State::kClosed) throw_error(PSTATE_ERR_INVALID_STATE, call, ": the context is finalized");
}

std::vector<Group *> Context::live_groups() const {
  std::vector<Group *> all;
  if (world_) all.push_back(world_.get());
  for (const auto &g : groups_) all.push_back(g.get());
  for (const auto &g : custom_groups_) all.push_back(g.get());
  return all;
}

std::vector<int> Context::live_ranks() {
  bool store_answered = false;
  std::vector<int> launch_live = live_launch_ranks(false, &store_answered);
  // A peer was lost, yet everyone is still here: the news (a notice from the rank that saw the
  // death) may have outrun the store's thread, which has not yet read the dead's connection end.
  // Ask again, briefly; a loss that is no process's end (a broken link) stays "all live".
  if (state_ == State::kFailed && failure_status_ == PSTATE_ERR_PEER_LOST && store_answered &&
      launch_live.size() == members_.size()) {
    const Deadline settle = Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 1000));
    const auto t0 = Deadline::Clock::now();
    while (store_answered && launch_live.size() == members_.size() && !settle.expired()) {
      ::usleep(5000);
      launch_live = live_launch_ranks(false, &store_answered);
    }
    log_.info("live ranks: the store listed every rank after a lost peer; asked again for ",
              std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - t0).count(), " ms: ",
              members_.size() - launch_live.size(), " gone");
  }
  std::vector<int> live;
  for (int r : launch_live) live.push_back(global_rank_of(r));
  return live;
}

int Context::global_rank_of(int launch_rank) const {
  auto it = std::find(members_.begin(), members_.end(), launch_rank);
  return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

// The members (launch ranks, in world order) not known to be dead. for_agreement (pstate_shrink):
// only a process's end counts — its store connection closed (any host) or its pid exited (same
// host); a UCX endpoint error does not, since a survivor that gave up on a collective may have
// force-closed its endpoints to live peers. Without a store that can tell, UCX's word counts too.
std::vector<int> Context::live_launch_ranks(bool for_agreement, bool *store_answered) {
  const int n = launch_.world_size;
  if (live_watches_.size() != static_cast<size_t>(n)) live_watches_.resize(static_cast<size_t>(n));
  // The store's view first: it sees the connection of every rank close, on any host.
  std::optional<std::vector<int>> connected;
  if (store_) {
    try {
      connected = store_->members(Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 2000)));
      if (store_answered) *store_answered = connected.has_value();
    } catch (const Error &e) {
      if (for_agreement) throw;
      log_.info("live ranks: the store cannot tell (", e.what(), "); what this rank saw itself decides");
    }
  }
  std::vector<int> live;
  live.reserve(members_.size());
  for (int r : members_) {
    bool dead = false;
    if (r != launch_rank()) {
      dead = connected && !std::binary_search(connected->begin(), connected->end(), r);
      if (!dead && worker_ && (!for_agreement || !connected)) dead = worker_->peer_lost(r);
      const PeerEntry &p = peers_.at(static_cast<size_t>(r));
      if (!dead && p.host_id == peers_.at(static_cast<size_t>(launch_rank())).host_id && p.pid > 0 &&
          p.pid != ::getpid()) {
        auto &w = live_watches_[static_cast<size_t>(r)];
        if (!w || w->pid() != static_cast<pid_t>(p.pid)) w = std::make_unique<ucx::ProcessWatch>(static_cast<pid_t>(p.pid));
        dead = w->exited();
      }
    }
    if (!dead) live.push_back(r);
  }
  return live;
}

void Context::require_host_memory(const void *p, const char *name, const char *group, const char *call) {
  if (p == nullptr) return;
  if (device_ctx_) {
    MemoryLocation loc = device_ctx_->locate(p);
    if (loc.kind != MemoryLocation::Kind::kDevice) return;
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, group, " ", call, ": ", name, " (", p, ") is CUDA device memory (device ",
                loc.device, ") but this operation moves it over the CPU communicator: pass host memory, or mark the "
                "tensor PSTATE_DEVICE_CUDA");
  }
  if (!host_check_.cuda_loaded()) return;  // a process without CUDA holds no device pointer
  host_check_.require_host(p, name, cat(group, " ", call));
}

void Context::require_host_memory(const void *p, const char *name, const void *p2, const char *name2,
                                  const char *group, const char *call) {
  if (device_ctx_ || host_check_.cuda_loaded()) {
    require_host_memory(p, name, group, call);
    if (p2 != p) require_host_memory(p2, name2, group, call);
  }
}

void *Context::begin_graph_capture_now(void *stream) {
  require_usable("pstate_graph_capture_begin");
  if (!device_ctx_)
    throw_error(PSTATE_ERR_UNSUPPORTED, "graph capture needs a CUDA context (device = PSTATE_DEVICE_CUDA); this "
                "context is CPU, where collectives run eagerly and there is no graph to record");
  if (device_ctx_->capturing())
    throw_error(PSTATE_ERR_INVALID_STATE, "this context is already in graph-capture mode (pstate_graph_capture_begin "
                "called twice): call pstate_graph_capture_end first");
  // A stream capture cannot create an NCCL communicator (it allocates device memory): every
  // group makes its own now, in the same order on every rank.
  for (Group *g : live_groups()) {
    g->ensure_device_ready("pstate_graph_capture_begin");
    g->sync_memory("pstate_graph_capture_begin");  // no window can be registered inside a capture
  }
  return device_ctx_->begin_capture(stream);
}

void Context::end_graph_capture_now() {
  require_usable("pstate_graph_capture_end");
  if (!device_ctx_)
    throw_error(PSTATE_ERR_UNSUPPORTED, "graph capture needs a CUDA context (device = PSTATE_DEVICE_CUDA); this "
                "context is CPU");
  device_ctx_->end_capture();
  // SGLang's graph_capture registers the graph's buffers: each group its own (local)
  if (graph_registration_)
    for (Group *g : live_groups()) g->register_graph_buffers();
}

void Context::abort_device_comms() noexcept {
  for (auto &g : groups_) g->abort_device();
  for (auto &g : custom_groups_) g->abort_device();
  for (auto &g : retired_) g->abort_device();
  if (world_) world_->abort_device();
}

void Context::close_groups() noexcept {
  for (auto &g : groups_) g->retire();
  for (auto &g : custom_groups_) g->retire();
  for (auto &g : retired_) g->retire();
  if (world_) world_->retire();
  groups_.clear();
  custom_groups_.clear();
  retired_.clear();
  world_.reset();
  by_kind_.fill(nullptr);
}

void Context::finalize_now() {
  if (state_ == State::kClosed) return;
  if (capturing() && state_ != State::kFailed)
    throw_error(PSTATE_ERR_INVALID_STATE, "pstate_finalize in graph-capture mode: nothing was released (the groups' "
                "NCCL communicators may be recorded into the graph); call pstate_graph_capture_end first, or "
                "pstate_abort");
  std::string first_error;
  pstate_status_t first_status = PSTATE_OK;
  if (state_ != State::kFailed && world_) {
    try {
      // Peers finish their last messages first; a peer in any other collective is a mismatch, not a
      // partner. In shared memory where the world has it, segment or not: a peer in its first world
      // collective waits in the segment, and only an arrival there tells it this rank finalized.
      world_->barrier(true, OpKind::kFinalize);
    } catch (const Error &e) {
      first_error = e.what();
      first_status = e.status();
    }
  }
  bool failed = state_ == State::kFailed || !first_error.empty();
  stop_dump_watcher();  // its connection goes before the store's
  // The serving rank keeps the store up until every other rank has left it.
  if (!failed) log_counts("finalize");  // before the store's close (a serving rank logs the server's totals there)
  if (store_ && !failed) store_->close(Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 10000)));
  // Device communicators: finalized with their peers, unless a peer may be gone.
  if (failed) abort_device_comms();
  close_groups();
  if (trace_) trace_->set_device_times(nullptr);
  device_ctx_.reset();
  if (worker_) {
    if (failed) worker_->force_close();
    else worker_->close(Deadline::after_ms(std::min<int64_t>(launch_.timeout_ms, 10000)));
  }
  worker_.reset();
  store_.reset();
  state_ = State::kClosed;
  log_.info("finalize: done");
  if (!first_error.empty())
    throw_error(first_status, "finalize could not reach every peer (", first_error,
                "); resources were released anyway");
}

// ---- device communicators split from the world's ----

bool Context::split_from_world() const {
  if (!device_ctx_ || world_size() < 2 || !world_ || !world_->device_splittable()) return false;
  const char *env = std::getenv("PSTATE_NCCL_SPLIT");
  return env == nullptr || std::string(env) != "0";
}

void Context::split_from_world_into(Group *child) {
  try {
    world_->split_device_into(child);
  } catch (const Error &e) {
    fail(e.what());  // the world's communicator took part in a failed collective
    throw;
  }
}

void Context::tell_peers_aborted(const char *call) noexcept {
  if (state_ == State::kFailed || state_ == State::kClosed) return;  // told already, or nothing to tell
  try {
    fail(cat(call, " on rank ", rank_, ": the application stopped this rank's context while no call of it was in "
             "flight (a watchdog or a shutdown); it takes part in no further call"),
         PSTATE_ERR_ABORTED);
  } catch (...) {  // no memory for the text: the peers learn of it by themselves
  }
}

void Context::abort() noexcept {
  if (state_ == State::kClosed) return;
  tell_peers_aborted("pstate_abort");  // a peer blocked in a call with this rank hears it now
  stop_dump_watcher();
  if (trace_) trace_life_end(trace_life(TraceOp::kAbort), PSTATE_OK);
  abort_device_comms();  // ncclCommAbort: local, waits for no peer
  close_groups();
  if (trace_) trace_->set_device_times(nullptr);
  device_ctx_.reset();
  if (worker_) worker_->force_close();
  worker_.reset();
  store_.reset();  // a serving rank 0 stops its server; clients close their socket
  state_ = State::kClosed;
}

}  // namespace pstate
