// rendezvous.cpp — pstate_init's rendezvous: the store, the UCX worker, every rank's record, the
// world group; what start-up cost (the INFO lines of log_counts); the flight recorder's dump
// watcher, which starts with the store.
//
// Collective over the world, bounded by its own deadline (PSTATE_INIT_TIMEOUT_MS, default 120 s,
// see launch_env.hpp):
//   1. resolve this rank's launch facts from the parameters and the environment (a rank outside
//      the world still tells the store, so the ranks that wait learn it at once, then fails);
//   2. open the store (rank 0 serves a tcp:// store; the store claims the rank, checks the job
//      token and the world size);
//   3. start the UCX worker and publish "pstate/peer/<rank>" = {local rank given, interfaces named,
//      worker address, pid, host id}; rank 0 gathers them into "pstate/peers", which every rank reads
//      (rank_records.hpp) into its peer table (peer_table.hpp); local ranks nobody gave are derived
//      from the hosts, duplicates refused; a CUDA context whose device ordinal was not known opens
//      its device now; ranks of different hosts that limited UCX to loopback interfaces are
//      refused on every rank, naming both;
//   4. build the world group and run one barrier over UCX: when pstate_init returns, every
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

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <random>

namespace pstate {

namespace {

std::string random_job_id() {
  std::random_device rd;
  uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

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
  const auto started = Deadline::Clock::now();
  Deadline deadline = Deadline::after_ms_from(started, launch_.init_timeout_ms);
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
    Error out =
        e.status() != PSTATE_ERR_TIMEOUT || told
            ? e
            : Error(e.status(),
                    cat(e.what(), " [the rendezvous' deadline: ", launch_.init_timeout_ms, " ms, from ",
                        launch_.init_timeout_origin, "; this rank gave up ",
                        std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - started).count(),
                        " ms after its rendezvous began]"));
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
  peers_.check_interfaces_reach();
  peers_.settle_local_ranks(launch_, log_);
  if (device_ == PSTATE_DEVICE_CUDA && !device_ctx_) open_device(device_ordinal_param_);  // its ordinal is known now
  worker_->set_directory([this](int r, bool urgent) { return peer_entry(r, urgent); });

  std::vector<int> all(static_cast<size_t>(launch_.world_size));
  for (int r = 0; r < launch_.world_size; ++r) all[static_cast<size_t>(r)] = r;
  members_ = all;
  rank_ = launch_.rank;
  groups_.set_world(make_group(PSTATE_GROUP_WORLD, 0, all, 0));
  world()->barrier(/*allow_shm=*/false);
  log_.info("init: world group of ", launch_.world_size, " ranks ready (job ", peers_.job_id(), ")");
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
  peers_.adopt(decode_rank_directory(rv.directory), launch_.world_size, launch_.rank,
               "init: the rank directory on the store");
  peers_.set_own_address(mine.peer.address);
  for (auto &[r, rec] : rv.first) peers_.take_address(r, std::move(rec.peer), "init: the first peers' records");
}

}  // namespace pstate
