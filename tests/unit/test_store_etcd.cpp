// test_store_etcd.cpp — what only the etcd store (etcd://HOST:PORT,.../PREFIX) does, against a
// real etcd started by this test (Debian's etcd-server on 127.0.0.1, free ports, a temp data dir,
// killed at the end: tests/support/etcd_server.hpp): watch_departures from leases (a killed rank
// is told gone within the lease TTL), clean-up of the job's keys and of a killed job's leftover,
// failover past a dead endpoint, what each endpoint said, a lost cluster named as etcd within the
// caller's deadline, leases that come back after a stall longer than the TTL (at start-up too), a
// restart on the same prefix, nested prefixes, the init method and PSTATE_STORE. What every store
// does (set, get, add, wait, rank claims, members(), tokens, refusals, absent ranks, interrupt())
// is test_store_contract.cpp's, which CTest runs over this store as test_store_contract_etcd.
// Each test uses its own prefix. Exits 77 (skipped) when no etcd binary is installed
// (`./build.sh deps` installs it).
#include "bootstrap/etcd_store.hpp"
#include "bootstrap/launch_env.hpp"
#include "bootstrap/roster.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "etcd_server.hpp"
#include "store_test_util.hpp"  // last: it brings cmocka

using namespace pstate;
using pstest::ChildBody;
using pstest::expect_error;
using pstest::kLongMs;
using pstest::Refusal;
using pstest::refusal_of;
using pstest::seconds_since;
using pstest::soon;
using pstest::wait_for_go;

namespace {

constexpr int kTtlS = 2;  // PSTATE_ETCD_LEASE_TTL_S for this test (etcd's minimum)
pstest::EtcdServer *g_etcd = nullptr;

// A fresh prefix per test (and per run: the etcd is fresh too, but a name says whose keys).
std::string fresh_prefix(const char *name) {
  static int n = 0;
  return "pstest/" + std::string(name) + "-" + std::to_string(getpid()) + "-" + std::to_string(++n);
}

std::string url_of(const std::string &prefix) { return "etcd://" + g_etcd->endpoint() + "/" + prefix; }

StoreOptions options_for(const std::string &url, int rank, int world, const std::string &token = "") {
  return pstest::store_options(url, rank, world, token);
}

std::unique_ptr<Store> open_etcd(const std::string &url, int rank, int world, const std::string &token = "") {
  return open_store(options_for(url, rank, world, token), Logger());
}

// A process that replaces a dead rank of a running job (PSTATE_REJOIN=1).
std::unique_ptr<Store> open_replacement(const std::string &url, int rank, int world) {
  StoreOptions o = options_for(url, rank, world);
  o.rejoin = true;
  return open_store(o, Logger());
}

int64_t keys_under(const std::string &prefix) { return g_etcd->keys_under(prefix); }

// watch_departures: the store tells (rank, true) when a rank's lease lapses (a killed process:
// no close, no revoke) within the TTL, and (rank, false) when the rank is claimed again.
void test_etcd_watch_departures_tells_a_lapsed_lease_and_a_new_claim(void **) {
  const std::string url = url_of(fresh_prefix("departures"));
  int go[2];
  assert_int_equal(::pipe(go), 0);
  pid_t child = -1;
  {
    ChildBody waiting = [&](int) -> int {  // forked before rank0's threads (wait_for_go)
      if (!wait_for_go(go[0])) return 1;
      auto store = open_etcd(url, 2, 3);
      ::kill(::getpid(), SIGKILL);
      return 0;
    };
    child = pstest::fork_child(waiting, 2);
  }
  auto rank0 = open_etcd(url, 0, 3);
  std::mutex mutex;
  std::vector<std::pair<int, bool>> seen;
  rank0->watch_departures([&](int r, bool gone) {
    std::lock_guard<std::mutex> lock(mutex);
    seen.emplace_back(r, gone);
  });
  auto count = [&](std::pair<int, bool> what) {
    std::lock_guard<std::mutex> lock(mutex);
    return std::count(seen.begin(), seen.end(), what);
  };
  assert_int_equal(count({2, false}), 0);
  assert_int_equal(::write(go[1], "g", 1), 1);
  for (int i = 0; i < 200 && count({2, false}) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  assert_int_equal(count({2, false}), 1);  // its claim
  assert_int_equal(pst_wait(child, kLongMs), 128 + SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  while (count({2, true}) == 0 && seconds_since(t0) < kTtlS + 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  double after = seconds_since(t0);
  std::printf("watch_departures told rank 2 gone %.2f s after its process was killed (lease TTL %d s)\n", after, kTtlS);
  assert_int_equal(count({2, true}), 1);
  assert_true(after <= kTtlS + 1.0);
  auto again = open_replacement(url, 2, 3);
  for (int i = 0; i < 100 && count({2, false}) < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  assert_int_equal(count({2, false}), 2);
  ::close(go[0]);
  ::close(go[1]);
}

// The last rank of the world to close removes the job's keys; a killed job's keys (no live
// lease) are removed by the next job's first rank.
void test_etcd_last_rank_out_removes_the_keys_and_a_leftover_is_reclaimed(void **) {
  const std::string prefix = fresh_prefix("cleanup"), url = url_of(prefix);
  {
    auto r0 = open_etcd(url, 0, 2), r1 = open_etcd(url, 1, 2);
    r0->set("x", bytes_of("1"), soon());
    assert_true(r0->close(soon()));
    assert_true(keys_under(prefix) > 0);
    assert_true(r1->close(soon()));
    assert_int_equal(keys_under(prefix), 0);
  }
  ChildBody killed_job = [&](int) -> int {
    auto store = open_etcd(url, 0, 2);
    store->set("addr/0", bytes_of("stale"), soon());
    ::kill(::getpid(), SIGKILL);
    return 0;
  };
  pid_t child = pstest::fork_child(killed_job, 0);
  assert_int_equal(pst_wait(child, kLongMs), 128 + SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(kTtlS * 1000 + 1200));  // its lease lapses
  auto fresh = open_etcd(url, 1, 3);  // another world size: the leftover is not this job's
  assert_false(fresh->check("addr/0", soon()));
  assert_true(fresh->members(soon()) == (std::vector<int>{1}));
}

// Failover: a dead endpoint first in the list costs a refused connection, not the job.
void test_etcd_fails_over_past_a_dead_endpoint(void **) {
  const std::string prefix = fresh_prefix("failover");
  const std::string url = "etcd://127.0.0.1:" + std::to_string(pstest::free_port()) + "," + g_etcd->endpoint() + "/" + prefix;
  auto r0 = open_etcd(url, 0, 2);
  auto r1 = open_etcd(url, 1, 2);
  r0->set("k", bytes_of("v"), soon());
  assert_string_equal(text_of(r1->get("k", soon())).c_str(), "v");
  assert_true(r0->members(soon()) == (std::vector<int>{0, 1}));
}

// Endpoints that say something definite — a refused connection, etcd's peer port answering 404
// — are named with what they said, within one attempt's time (2 s of retries, for a member that
// restarts), not after the caller's whole deadline as a "lost quorum".
void test_etcd_errors_name_what_each_endpoint_said_within_one_attempt(void **) {
  const std::string a = "127.0.0.1:" + std::to_string(pstest::free_port()),
                    b = "127.0.0.1:" + std::to_string(pstest::free_port());
  const std::string dead = "etcd://" + a + "," + b + "/" + fresh_prefix("dead");
  StoreOptions o = options_for(dead, 0, 1);
  o.timeout_ms = 10000;
  auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { open_store(o, Logger()); }, PSTATE_ERR_PEER_LOST,
               {"etcd store " + dead, "no etcd member could be reached", a + ": Connection refused",
                b + ": Connection refused", "is etcd running there"});
  double refused_after = seconds_since(t0);
  const std::string peer = "etcd://" + g_etcd->peer_endpoint() + "/" + fresh_prefix("peer");
  o = options_for(peer, 0, 1);
  o.timeout_ms = 10000;
  t0 = std::chrono::steady_clock::now();
  expect_error([&] { open_store(o, Logger()); }, PSTATE_ERR_PEER_LOST,
               {g_etcd->peer_endpoint() + ": answered HTTP 404", "not etcd's client API", "not its peer port"});
  double not_etcd_after = seconds_since(t0);
  std::printf("refused endpoints named after %.2f s, etcd's peer port after %.2f s (deadline 10 s)\n", refused_after,
              not_etcd_after);
  assert_true(refused_after < 5.0);
  assert_true(not_etcd_after < 5.0);
}

// A cluster that does not answer (stopped: no quorum to be had) is PEER_LOST naming etcd and
// every endpoint, within the caller's deadline: no hang.
void test_etcd_lost_cluster_is_a_clear_error_within_the_deadline(void **) {
  // A store that was open when etcd stopped answering (SIGSTOP: connections hang, as with a
  // member cut off from its quorum).
  const std::string url = url_of(fresh_prefix("paused"));
  auto store = open_etcd(url, 0, 1);
  g_etcd->pause();
  auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { store->get("k", Deadline::after_ms(3000)); }, PSTATE_ERR_PEER_LOST,
               {"no etcd member answered before the deadline", "lost quorum", g_etcd->endpoint() + ": no answer in"});
  double took = seconds_since(t0);
  expect_error([&] { store->members(Deadline::after_ms(1000)); }, PSTATE_ERR_PEER_LOST, {"etcd"});
  g_etcd->resume();
  std::printf("a get on a silent etcd failed after %.2f s (deadline 3 s)\n", took);
  assert_true(took < 4.0);
  store->set("k", bytes_of("back"), soon());  // answers again after the pause
}

// The rank keys under a job's prefix with their leases, read with a client of its own: "rank/R"
// -> lease ID (whatever the layout under the prefix).
std::map<std::string, int64_t> rank_leases(const std::string &prefix) {
  EtcdConfig config;
  config.endpoints = {"http://" + g_etcd->endpoint()};
  config.name = "test";
  EtcdClient client(config);
  std::string p = prefix + "/", end = prefix + "0";
  nlohmann::json answer =
      client.call("/v3/kv/range", nlohmann::json{{"key", base64_encode(p)}, {"range_end", base64_encode(end)}}, soon(), "read");
  std::map<std::string, int64_t> out;
  for (const auto &kv : answer.value("kvs", nlohmann::json::array())) {
    std::string key = base64_decode(kv.value("key", ""));
    size_t at = key.rfind("/rank/");
    if (at != std::string::npos && key.compare(0, p.size(), p) == 0 && key.find('/', p.size()) >= at)
      out[key.substr(at + 1)] = json_i64(kv, "lease");
  }
  return out;
}

// etcd out of reach for longer than the lease TTL (SIGSTOP, as a member cut off from its quorum;
// etcd revokes every lease it could not renew when it runs again): each rank's keeper takes a
// new lease and claims its rank again, no rank is told another one is gone, and close still
// removes the job's keys (issue 44, item 3: the keeper used to stop for good, members() then
// listed nobody, and close was refused).
void test_etcd_leases_come_back_after_a_stall_longer_than_the_ttl(void **) {
  const std::string prefix = fresh_prefix("stall"), url = url_of(prefix);
  auto r0 = open_etcd(url, 0, 2), r1 = open_etcd(url, 1, 2);
  std::mutex mutex;
  std::vector<std::pair<int, bool>> seen;
  r0->watch_departures([&](int r, bool gone) {
    std::lock_guard<std::mutex> lock(mutex);
    seen.emplace_back(r, gone);
  });
  const std::map<std::string, int64_t> before = rank_leases(prefix);
  assert_int_equal(before.size(), 2);
  g_etcd->pause();
  std::this_thread::sleep_for(std::chrono::milliseconds(kTtlS * 1000 + 1500));
  g_etcd->resume();
  // Back when both ranks hold their ranks with new leases (the old ones were revoked).
  auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, int64_t> after;
  for (;;) {
    after = rank_leases(prefix);
    bool renewed = after.size() == 2;
    for (const auto &[key, lease] : after) renewed = renewed && before.count(key) && before.at(key) != lease;
    if (renewed || seconds_since(t0) > 4.0 * kTtlS) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("both ranks held their ranks with new leases %.2f s after etcd ran again (%zu claims)\n",
              seconds_since(t0), after.size());
  assert_int_equal(after.size(), 2);
  for (const auto &[key, lease] : after) assert_true(before.at(key) != lease);
  auto observer = open_etcd(url, -1, 0);
  assert_true(observer->members(soon()) == (std::vector<int>{0, 1}));
  assert_true(r0->members(soon()) == (std::vector<int>{0, 1}));
  {
    std::lock_guard<std::mutex> lock(mutex);
    assert_int_equal(std::count(seen.begin(), seen.end(), std::make_pair(1, true)), 0);
  }
  r0->set("after", bytes_of("stall"), soon());
  assert_string_equal(text_of(r1->get("after", soon())).c_str(), "stall");
  assert_true(r0->close(soon()));
  assert_true(r1->close(soon()));
  assert_int_equal(keys_under(prefix), 0);
}

// A transient etcd stall during the rendezvous: the early rank's lease lapsed when the late rank
// comes (the early rank is stopped as well, so it has not claimed its rank again yet). The late
// rank does not take the running job for an ended one: it waits for the claim to come back and
// joins, with the early rank's keys intact (issue 44, item 6: it removed them).
void test_etcd_a_stall_at_start_up_costs_time_not_the_job(void **) {
  const std::string url = url_of(fresh_prefix("startstall"));
  int opened[2];
  assert_int_equal(::pipe(opened), 0);
  ChildBody early = [&](int) -> int {
    auto store = open_etcd(url, 0, 2);
    store->set("addr/0", bytes_of("zero"), soon());
    (void)!::write(opened[1], "x", 1);
    store_barrier(*store, "met", 2, soon());
    CHILD_CHECK(text_of(store->get("addr/1", soon())) == "one");
    return store->close(soon()) ? 0 : 1;
  };
  pid_t child = pstest::fork_child(early, 0);
  char c;
  pollfd p{opened[0], POLLIN, 0};
  assert_int_equal(::poll(&p, 1, kLongMs), 1);
  assert_int_equal(::read(opened[0], &c, 1), 1);
  g_etcd->pause();
  ::kill(child, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(kTtlS * 1000 + 1500));
  g_etcd->resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // etcd revokes the lapsed lease
  std::thread wake([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    ::kill(child, SIGCONT);
  });
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Store> late;
  Refusal r = refusal_of([&] { late = open_etcd(url, 1, 2); });
  wake.join();
  std::printf("the late rank joined %.2f s after it came\n", seconds_since(t0));
  assert_int_equal(r.status, PSTATE_OK);
  std::string early_addr;
  Refusal read = refusal_of([&] { early_addr = text_of(late->get("addr/0", Deadline::after_ms(5000))); });
  assert_int_equal(read.status, PSTATE_OK);  // the early rank's key is still there
  assert_string_equal(early_addr.c_str(), "zero");
  late->set("addr/1", bytes_of("one"), soon());
  store_barrier(*late, "met", 2, soon());
  assert_int_equal(pst_wait(child, kLongMs), 0);
  assert_true(late->close(soon()));
  ::close(opened[0]);
  ::close(opened[1]);
}

// A job killed and started again on the same prefix within the lease TTL — with the same token
// and job id (a Kubernetes Secret), or with `pstate run`'s fresh token and id — waits for the old
// run's leases to lapse, removes its keys and starts (issue 44, item 7: MISMATCH "3 arrivals for
// 2 ranks", or AUTH). Jobs that still run on the prefix are refused in words that name it.
void test_etcd_a_restart_within_the_ttl_starts_afresh(void **) {
  const std::string prefix = fresh_prefix("restart"), url = url_of(prefix);
  struct Run {
    const char *token, *job_id;
  };
  for (Run second : {Run{"secret", "job"}, Run{"fresh", "job-2"}}) {
    int ready[2];
    assert_int_equal(::pipe(ready), 0);
    ChildBody first_run = [&](int) -> int {
      StoreOptions a = options_for(url, 0, 2, "secret"), b = options_for(url, 1, 2, "secret");
      a.job_id = b.job_id = "job";
      auto r0 = open_store(a, Logger()), r1 = open_store(b, Logger());
      r0->add("arrivals", 1, soon());
      r1->add("arrivals", 1, soon());
      (void)!::write(ready[1], "x", 1);
      ::sleep(120);  // until killed
      return 0;
    };
    pid_t child = pstest::fork_child(first_run, 0);
    char c;
    pollfd p{ready[0], POLLIN, 0};
    assert_int_equal(::poll(&p, 1, kLongMs), 1);
    assert_int_equal(::read(ready[0], &c, 1), 1);
    ::kill(child, SIGKILL);
    assert_int_equal(pst_wait(child, kLongMs), 128 + SIGKILL);
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Store> ranks[2];
    Refusal refused[2];
    std::thread opener[2];
    for (int r = 0; r < 2; ++r)
      opener[r] = std::thread([&, r] {
        StoreOptions o = options_for(url, r, 2, second.token);
        o.job_id = second.job_id;
        refused[r] = refusal_of([&] { ranks[r] = open_store(o, Logger()); });
      });
    for (auto &t : opener) t.join();
    std::printf("the second run (token '%s') started %.2f s after the first was killed (lease TTL %d s)\n", second.token,
                seconds_since(t0), kTtlS);
    assert_int_equal(refused[0].status, PSTATE_OK);
    assert_int_equal(refused[1].status, PSTATE_OK);
    assert_false(ranks[0]->check("arrivals", soon()));  // the first run's keys are gone
    assert_int_equal(ranks[0]->add("arrivals", 1, soon()) + ranks[1]->add("arrivals", 1, soon()), 3);
    assert_true(ranks[0]->close(soon()) && ranks[1]->close(soon()));
    ::close(ready[0]);
    ::close(ready[1]);
  }
  // A job that runs on the prefix: another one (another token; the same token, another id) is
  // told the prefix is taken, once the running job's leases outlived their TTL.
  StoreOptions running = options_for(url, 0, 2, "a");
  running.job_id = "A";
  auto a0 = open_store(running, Logger());
  Refusal other_token, other_id;
  std::thread t1([&] {
    StoreOptions o = options_for(url, 0, 2, "b");
    o.job_id = "B";
    other_token = refusal_of([&] { open_store(o, Logger()); });
  });
  std::thread t2([&] {
    StoreOptions o = options_for(url, 0, 2, "a");
    o.job_id = "C";
    other_id = refusal_of([&] { open_store(o, Logger()); });
  });
  t1.join();
  t2.join();
  assert_int_equal(other_token.status, PSTATE_ERR_AUTH);
  assert_true(other_token.has("the prefix '" + prefix + "' holds a job ('A') still running (rank 0 (pid ") && other_token.has("renews its etcd lease"));
  assert_true(other_token.has("give it a prefix of its own"));
  assert_int_equal(other_id.status, PSTATE_ERR_MISMATCH);
  assert_true(other_id.has("belongs to job 'A', not to this job 'C'") && other_id.has("the prefix '" + prefix + "'"));
  assert_true(a0->members(soon()) == (std::vector<int>{0}));  // the refused did not touch it
}

// Jobs on P, on P/b and on P/rank/7 (a name the store uses under every prefix) live side by side:
// none lists, reads or removes another's keys (issue 44, item 4: P's close removed P/b's).
void test_etcd_nested_prefixes_live_side_by_side(void **) {
  const std::string outer = fresh_prefix("outer"), inner = outer + "/b", odd = outer + "/rank/7";
  auto a0 = open_etcd(url_of(outer), 0, 1);
  auto b0 = open_etcd(url_of(inner), 0, 2), b1 = open_etcd(url_of(inner), 1, 2);
  auto c1 = open_etcd(url_of(odd), 1, 2);
  assert_true(a0->members(soon()) == (std::vector<int>{0}));
  assert_true(b0->members(soon()) == (std::vector<int>{0, 1}));
  assert_true(c1->members(soon()) == (std::vector<int>{1}));
  b0->set("addr/0", bytes_of("inner"), soon());
  assert_false(a0->check("addr/0", soon()));
  assert_true(a0->close(soon()));  // P's last rank: removes P's keys, and only those
  assert_int_equal(rank_leases(inner).size(), 2);
  assert_true(b1->members(soon()) == (std::vector<int>{0, 1}));
  assert_string_equal(text_of(b1->get("addr/0", soon())).c_str(), "inner");
  assert_true(c1->members(soon()) == (std::vector<int>{1}));
  assert_true(b0->close(soon()) && b1->close(soon()));
  assert_int_equal(keys_under(inner), 0);
  assert_true(c1->members(soon()) == (std::vector<int>{1}));
}

void test_etcd_init_method_and_pstate_store(void **) {
  InitMethod m = parse_init_method("etcd://h1:2379,10.0.0.2:2379,[::1]:2380/jobs/job7/");
  assert_true(m.kind == InitMethod::Kind::kEtcd);
  assert_int_equal(m.endpoints.size(), 3);
  assert_string_equal(m.endpoints[2].c_str(), "[::1]:2380");
  assert_string_equal(m.path.c_str(), "jobs/job7");
  assert_string_equal(m.url().c_str(), "etcd://h1:2379,10.0.0.2:2379,[::1]:2380/jobs/job7");
  assert_true(parse_init_method("etcds://h1:2379").tls);
  assert_string_equal(parse_init_method("etcd://h1:2379").path.c_str(), "pstate");
  expect_error([] { parse_init_method("etcd:///job"); }, PSTATE_ERR_INVALID_ARGUMENT, {"no etcd endpoint"});
  expect_error([] { parse_init_method("etcd://h1:2379,,h2:2379/j"); }, PSTATE_ERR_INVALID_ARGUMENT, {"empty endpoint"});
  expect_error([] { parse_init_method("etcd://h1/j"); }, PSTATE_ERR_INVALID_ARGUMENT, {"no port"});
  expect_error([] { parse_init_method("etcd://h1:2379/job 7"); }, PSTATE_ERR_INVALID_ARGUMENT, {"only letters, digits"});
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  LaunchEnv env = resolve_launch_env(
      params, fixed_environment({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"PSTATE_STORE", "etcd://a:2379,b:2379/j"}}));
  assert_true(env.store.kind == InitMethod::Kind::kEtcd);
  assert_string_equal(env.store_options().init_method.c_str(), "etcd://a:2379,b:2379/j");
  expect_error([] { setenv("PSTATE_ETCD_LEASE_TTL_S", "1", 1), open_etcd(url_of("x"), 0, 1); },
               PSTATE_ERR_INVALID_ARGUMENT, {"PSTATE_ETCD_LEASE_TTL_S='1'", "2..60"});
  setenv("PSTATE_ETCD_LEASE_TTL_S", std::to_string(kTtlS).c_str(), 1);
}

}  // namespace

int main(void) {
  alarm(600);  // the whole file, in the worst case; each test bounds itself far below this
  pstest::EtcdServer etcd;
  if (!etcd.start()) {
    std::printf("SKIPPED: no etcd binary (install etcd-server: ./build.sh deps)\n");
    return 77;
  }
  g_etcd = &etcd;
  setenv("PSTATE_ETCD_LEASE_TTL_S", std::to_string(kTtlS).c_str(), 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_etcd_watch_departures_tells_a_lapsed_lease_and_a_new_claim),
      cmocka_unit_test(test_etcd_last_rank_out_removes_the_keys_and_a_leftover_is_reclaimed),
      cmocka_unit_test(test_etcd_fails_over_past_a_dead_endpoint),
      cmocka_unit_test(test_etcd_errors_name_what_each_endpoint_said_within_one_attempt),
      cmocka_unit_test(test_etcd_lost_cluster_is_a_clear_error_within_the_deadline),
      cmocka_unit_test(test_etcd_leases_come_back_after_a_stall_longer_than_the_ttl),
      cmocka_unit_test(test_etcd_a_stall_at_start_up_costs_time_not_the_job),
      cmocka_unit_test(test_etcd_a_restart_within_the_ttl_starts_afresh),
      cmocka_unit_test(test_etcd_nested_prefixes_live_side_by_side),
      cmocka_unit_test(test_etcd_init_method_and_pstate_store),
  };
  if (const char *only = std::getenv("PSTATE_TEST_FILTER")) cmocka_set_test_filter(only);  // e.g. "*stall*"
  int failed = cmocka_run_group_tests(tests, nullptr, nullptr);
  g_etcd = nullptr;
  return failed;
}
