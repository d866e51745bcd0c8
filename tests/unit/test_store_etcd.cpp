// test_store_etcd.cpp — the etcd store (etcd://HOST:PORT,.../PREFIX) against a real etcd started
// by this test (Debian's etcd-server on 127.0.0.1, free ports, a temp data dir, killed at the
// end: tests/support/etcd_server.hpp). The same spec as the TCP and file stores (set, get, add,
// wait, check, erase; get waiting for a later set; atomic add and first-writer-wins across
// processes; deadlines naming keys and absent ranks; job token, rank claims, world size, refused
// members failing the waiting ranks at once), plus what etcd adds: members() from leases (a
// killed rank is gone within the lease TTL, a closed one at once; watch_departures tells it),
// failover past a dead endpoint,
// a lost cluster named as etcd within the caller's deadline, interrupt(), clean-up of the job's
// keys and of a killed job's leftover, the init method and PSTATE_STORE. Each test uses its own
// prefix. Exits 77 (skipped) when no etcd binary is installed (`./build.sh deps` installs it).
#include "bootstrap/etcd_store.hpp"
#include "bootstrap/launch_env.hpp"

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

namespace {

constexpr int64_t kLongMs = 30000;
constexpr int kTtlS = 2;  // PSTATE_ETCD_LEASE_TTL_S for this test (etcd's minimum)
pstest::EtcdServer *g_etcd = nullptr;

Deadline soon() { return Deadline::after_ms(kLongMs); }
Bytes bytes_of(const std::string &s) { return Bytes(s.begin(), s.end()); }
std::string text_of(const Bytes &b) { return std::string(b.begin(), b.end()); }
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A fresh prefix per test (and per run: the etcd is fresh too, but a name says whose keys).
std::string fresh_prefix(const char *name) {
  static int n = 0;
  return "pstest/" + std::string(name) + "-" + std::to_string(getpid()) + "-" + std::to_string(++n);
}

std::string url_of(const std::string &prefix) { return "etcd://" + g_etcd->endpoint() + "/" + prefix; }

StoreOptions options_for(const std::string &url, int rank, int world, const std::string &token = "") {
  StoreOptions o;
  o.init_method = url;
  o.rank = rank;
  o.world_size = world;
  o.job_token = token;
  o.timeout_ms = kLongMs;
  return o;
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

// The number of etcd keys under a prefix, read with a client of its own (not the store's).
int64_t keys_under(const std::string &prefix) {
  EtcdConfig config;
  config.endpoints = {"http://" + g_etcd->endpoint()};
  config.name = "test";
  EtcdClient client(config);
  std::string p = prefix + "/", end = prefix + "0";  // '0' follows '/'
  nlohmann::json answer = client.call(
      "/v3/kv/range", nlohmann::json{{"key", base64_encode(p)}, {"range_end", base64_encode(end)}, {"count_only", true}},
      soon(), "count");
  return json_i64(answer, "count");
}

void test_etcd_four_processes_set_get_add_wait_check(void **) {
  const std::string url = url_of(fresh_prefix("four"));
  constexpr int kWorld = 4;
  pstest::run_children(
      kWorld,
      [&](int rank) -> int {
        auto store = open_etcd(url, rank, kWorld, "job-secret");
        store->add("arrived", 1, soon());  // before the set, so every value seen implies its add
        store->set("value/" + std::to_string(rank), bytes_of("from rank " + std::to_string(rank)), soon());
        std::vector<std::string> keys;
        for (int r = 0; r < kWorld; ++r) keys.push_back("value/" + std::to_string(r));
        store->wait(keys, soon());
        for (int r = 0; r < kWorld; ++r) {
          CHILD_CHECK(store->check(keys[r], soon()));
          CHILD_CHECK(text_of(store->get(keys[r], soon())) == "from rank " + std::to_string(r));
        }
        CHILD_CHECK(!store->check("value/never", soon()));
        CHILD_CHECK(text_of(store->get("arrived", soon())) == "4");
        store_barrier(*store, "done", kWorld, soon());
        return store->close(soon()) ? 0 : 1;
      },
      60000);
}

void test_etcd_add_is_atomic_across_processes(void **) {
  const std::string url = url_of(fresh_prefix("add"));
  constexpr int kWorld = 4, kAdds = 25;
  pstest::run_children(
      kWorld,
      [&](int rank) -> int {
        auto store = open_etcd(url, rank, kWorld);
        store_barrier(*store, "opened", kWorld, soon());
        for (int i = 0; i < kAdds; ++i) store->add("counter", 1, soon());
        return 0;
      },
      60000);
  auto observer = open_etcd(url, -1, 0);
  assert_string_equal(text_of(observer->get("counter", soon())).c_str(), std::to_string(kWorld * kAdds).c_str());
}

void test_etcd_set_if_absent_first_writer_wins(void **) {
  const std::string url = url_of(fresh_prefix("sia"));
  constexpr int kWorld = 4, kRounds = 10;
  pstest::run_children(
      kWorld,
      [&](int rank) -> int {
        auto store = open_etcd(url, rank, kWorld);
        store_barrier(*store, "start", kWorld, soon());
        for (int round = 0; round < kRounds; ++round) {
          std::string key = "race/" + std::to_string(round);
          std::string got = text_of(store->set_if_absent(key, bytes_of("rank " + std::to_string(rank)), soon()));
          CHILD_CHECK(got.rfind("rank ", 0) == 0);
          store->set("saw/" + std::to_string(round) + "/" + std::to_string(rank), bytes_of(got), soon());
          if (got == "rank " + std::to_string(rank)) store->add("winners/" + std::to_string(round), 1, soon());
        }
        store_barrier(*store, "done", kWorld, soon());
        return 0;
      },
      60000);
  auto observer = open_etcd(url, -1, 0);
  for (int round = 0; round < kRounds; ++round) {
    assert_string_equal(text_of(observer->get("winners/" + std::to_string(round), soon())).c_str(), "1");
    std::string first = text_of(observer->get("saw/" + std::to_string(round) + "/0", soon()));
    for (int r = 1; r < kWorld; ++r)
      assert_string_equal(text_of(observer->get("saw/" + std::to_string(round) + "/" + std::to_string(r), soon())).c_str(),
                          first.c_str());
  }
}

void test_etcd_get_waits_for_a_later_set(void **) {
  const std::string url = url_of(fresh_prefix("later"));
  int about_to_get[2];
  assert_int_equal(::pipe(about_to_get), 0);
  ChildBody reader = [&](int) -> int {
    auto store = open_etcd(url, 1, 2);
    CHILD_CHECK(!store->check("late", soon()));
    (void)!::write(about_to_get[1], "x", 1);
    CHILD_CHECK(text_of(store->get("late", soon())) == "worth the wait");
    return 0;
  };
  pid_t child = pstest::fork_child(reader, 1);
  auto rank0 = open_etcd(url, 0, 2);
  char c;
  pollfd p{about_to_get[0], POLLIN, 0};
  assert_int_equal(::poll(&p, 1, kLongMs), 1);
  assert_int_equal(::read(about_to_get[0], &c, 1), 1);
  rank0->set("late", bytes_of("worth the wait"), soon());
  assert_int_equal(pst_wait(child, kLongMs), 0);
  ::close(about_to_get[0]);
  ::close(about_to_get[1]);
}

void test_etcd_get_past_deadline_is_timeout_naming_the_key(void **) {
  const std::string url = url_of(fresh_prefix("deadline"));
  auto store = open_etcd(url, 0, 1);
  expect_error([&] { store->get("never/set", Deadline::after_ms(300)); }, PSTATE_ERR_TIMEOUT,
               {"get('never/set')", "waiting for key 'never/set'", url});
  store->set("here", bytes_of("1"), soon());
  expect_error([&] { store->wait({"here", "missing"}, Deadline::after_ms(300)); }, PSTATE_ERR_TIMEOUT,
               {"1 of 2 keys never set: 'missing'"});
}

// The status and text an open fails with, from any thread (cmocka asserts stay on the main one).
struct Refusal {
  pstate_status_t status = PSTATE_OK;
  std::string text;
  bool has(const std::string &fragment) const { return text.find(fragment) != std::string::npos; }
};
Refusal refusal_of(const std::function<void()> &open) {
  Refusal r;
  try {
    open();
  } catch (const Error &e) {
    r.status = e.status();
    r.text = e.what();
  }
  if (r.status != PSTATE_OK) std::printf("refused as expected: %s: %s\n", pstate_status_string(r.status), r.text.c_str());
  return r;
}

// A process with another token is refused once the job's leases outlived their TTL (it might
// have been a job that just ended); both refusals wait at once.
void test_etcd_wrong_or_missing_token_is_auth_error(void **) {
  const std::string prefix = fresh_prefix("token"), url = url_of(prefix);
  auto rank0 = open_etcd(url, 0, 2, "right-token");
  Refusal wrong, none;
  std::thread t1([&] { wrong = refusal_of([&] { open_etcd(url, 1, 2, "wrong-token"); }); });
  std::thread t2([&] { none = refusal_of([&] { open_etcd(url, 1, 2, ""); }); });
  t1.join();
  t2.join();
  assert_int_equal(wrong.status, PSTATE_ERR_AUTH);
  assert_true(wrong.has("job token refused by the store at " + url) && wrong.has("set PSTATE_JOB_TOKEN"));
  assert_true(wrong.has("the prefix '" + prefix + "' holds a job") && wrong.has("a prefix of its own"));
  assert_int_equal(none.status, PSTATE_ERR_AUTH);
  assert_true(none.has("job token refused"));
  auto rank1 = open_etcd(url, 1, 2, "right-token");  // the refused attempts did not take rank 1
  assert_non_null(rank1.get());
}

void test_etcd_job_id_names_the_other_job(void **) {
  const std::string url = url_of(fresh_prefix("jobid"));
  StoreOptions a = options_for(url, 0, 2), b = options_for(url, 1, 2);
  a.job_id = "job-a";
  b.job_id = "job-b";
  auto rank0 = open_store(a, Logger());
  expect_error([&] { open_store(b, Logger()); }, PSTATE_ERR_MISMATCH,
               {"belongs to job 'job-a', not to this job 'job-b'"});
}

// A duplicate claim waits for the holder's lease to lapse (TTL + 1 s): a live holder keeps it.
void test_etcd_duplicate_rank_is_mismatch_naming_the_holder(void **) {
  const std::string url = url_of(fresh_prefix("dup"));
  auto first = open_etcd(url, 1, 3);
  expect_error([&] { open_etcd(url, 1, 3); }, PSTATE_ERR_MISMATCH,
               {"rank 1 is already taken by another process (pid " + std::to_string(getpid()), "etcd lease"});
  assert_true(first->close(soon()));  // released on close, at once
  expect_error([&] { first->get("k", soon()); }, PSTATE_ERR_INVALID_STATE, {"closed by this rank"});
  auto t0 = std::chrono::steady_clock::now();
  auto second = open_etcd(url, 1, 3);
  assert_true(seconds_since(t0) < 1.0);
}

// A child that opens a store must be forked before this process starts threads of its own (a
// store's lease keeper and watcher): a fork of a multi-threaded process can inherit a lock that
// one of those threads held (the allocator's, libcurl's), and the child then hangs in its open.
// So the child is forked first and waits here for the parent's go (a byte on the pipe), or gives
// up after kLongMs.
bool wait_for_go(int fd) {
  pollfd p{fd, POLLIN, 0};
  char c;
  return ::poll(&p, 1, static_cast<int>(kLongMs)) == 1 && ::read(fd, &c, 1) == 1;
}

// A killed rank: its lease lapses within the TTL; members() drops it and its rank can be claimed
// again (by a replacement, PSTATE_REJOIN=1, that started while the lease was still live).
void test_etcd_killed_rank_leaves_members_within_the_ttl_and_can_be_claimed(void **) {
  const std::string url = url_of(fresh_prefix("killed"));
  int claimed[2], go[2];
  assert_int_equal(::pipe(claimed), 0);
  assert_int_equal(::pipe(go), 0);
  ChildBody holder = [&](int) -> int {
    if (!wait_for_go(go[0])) return 1;
    auto store = open_etcd(url, 2, 3);
    (void)!::write(claimed[1], "x", 1);
    ::sleep(120);  // until killed
    return 0;
  };
  pid_t child = pstest::fork_child(holder, 2);  // before rank0's threads (wait_for_go)
  auto rank0 = open_etcd(url, 0, 3);
  assert_int_equal(::write(go[1], "g", 1), 1);
  char c;
  pollfd p{claimed[0], POLLIN, 0};
  assert_int_equal(::poll(&p, 1, kLongMs), 1);
  assert_int_equal(::read(claimed[0], &c, 1), 1);
  assert_true(rank0->members(soon()) == (std::vector<int>{0, 2}));
  ::kill(child, SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  assert_int_equal(pst_wait(child, kLongMs), 128 + SIGKILL);
  auto again = open_replacement(url, 2, 3);  // waits for the dead holder's lease, then claims
  double claimed_after = seconds_since(t0);
  std::printf("rank 2 claimed again %.2f s after its holder was killed (lease TTL %d s)\n", claimed_after, kTtlS);
  assert_true(claimed_after <= kTtlS + 1.5);
  assert_true(rank0->members(soon()) == (std::vector<int>{0, 2}));
  again.reset();  // destroyed without close: the lease lapses within the TTL
  auto t1 = std::chrono::steady_clock::now();
  while (rank0->members(soon()) != std::vector<int>{0} && seconds_since(t1) < kTtlS + 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  double gone_after = seconds_since(t1);
  std::printf("members() dropped the vanished rank %.2f s after it stopped renewing (lease TTL %d s)\n", gone_after, kTtlS);
  assert_true(rank0->members(soon()) == (std::vector<int>{0}));
  assert_true(gone_after <= kTtlS + 1.0);
  ::close(claimed[0]);
  ::close(claimed[1]);
  ::close(go[0]);
  ::close(go[1]);
}

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

void test_etcd_members_are_the_ranks_with_a_live_lease(void **) {
  const std::string url = url_of(fresh_prefix("members"));
  auto rank0 = open_etcd(url, 0, 4);
  auto rank3 = open_etcd(url, 3, 4);
  auto rank1 = open_etcd(url, 1, 4);
  auto observer = open_etcd(url, -1, 0);
  assert_true(rank3->members(soon()) == (std::vector<int>{0, 1, 3}));
  assert_true(observer->members(soon()) == (std::vector<int>{0, 1, 3}));
  assert_true(rank1->close(soon()));  // close revokes the lease: gone at once
  assert_true(rank3->members(soon()) == (std::vector<int>{0, 3}));
}

void test_etcd_rank_outside_world_is_mismatch(void **) {
  const std::string url = url_of(fresh_prefix("outside"));
  auto rank0 = open_etcd(url, 0, 4);
  expect_error([&] { open_etcd(url, 5, 4); }, PSTATE_ERR_MISMATCH,
               {"rank 5 is out of range for world_size 4 (ranks are 0..3)"});
}

void test_etcd_world_size_disagreement_is_mismatch_naming_both_ranks(void **) {
  const std::string url = url_of(fresh_prefix("world"));
  auto rank0 = open_etcd(url, 0, 4);
  expect_error([&] { open_etcd(url, 3, 8); }, PSTATE_ERR_MISMATCH, {"rank 3 says world_size 8, rank 0 says 4"});
}

void test_etcd_keys_binary_long_and_large_values_round_trip(void **) {
  const std::string url = url_of(fresh_prefix("keys"));
  auto store = open_etcd(url, 0, 1);
  std::string long_a(4096, 'a'), long_b = long_a;
  long_b.back() = 'b';
  std::string binary("k\0\xff/..\n", 7);
  store->set(long_a, bytes_of("A"), soon());
  store->set(long_b, bytes_of("B"), soon());
  store->set(binary, bytes_of(std::string("\0\1\2", 3)), soon());
  store->set("a/b", bytes_of("slash"), soon());
  assert_string_equal(text_of(store->get(long_a, soon())).c_str(), "A");
  assert_string_equal(text_of(store->get(long_b, soon())).c_str(), "B");
  assert_true(store->get(binary, soon()) == bytes_of(std::string("\0\1\2", 3)));
  assert_false(store->check("a", soon()));
  Bytes big(512 << 10);  // etcd takes requests up to 1.5 MiB (--max-request-bytes), base64 included
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + 3);
  store->set("big", big, soon());
  assert_true(store->get("big", soon()) == big);
  expect_error([&] { store->set("huge", Bytes(kStoreMaxValueBytes + 1), soon()); }, PSTATE_ERR_INVALID_ARGUMENT,
               {"at most"});
}

void test_etcd_erase_check_and_add_on_non_integer(void **) {
  const std::string url = url_of(fresh_prefix("erase"));
  auto store = open_etcd(url, 0, 1);
  assert_int_equal(store->add("n", 5, soon()), 5);
  assert_int_equal(store->add("n", -7, soon()), -2);
  assert_string_equal(text_of(store->get("n", soon())).c_str(), "-2");
  assert_true(store->erase("n", soon()));
  assert_false(store->erase("n", soon()));
  assert_false(store->check("n", soon()));
  store->set("word", bytes_of("hello"), soon());
  expect_error([&] { store->add("word", 1, soon()); }, PSTATE_ERR_INVALID_ARGUMENT, {"not a decimal integer"});
  assert_string_equal(text_of(store->set_if_absent("word", bytes_of("other"), soon())).c_str(), "hello");
}

// A process of the job refused before every rank joined ends the job: the waiting ranks hear at
// once (their watch wakes on PREFIX/failed).
void test_etcd_refused_member_fails_the_waiting_ranks_at_once(void **) {
  const std::string url = url_of(fresh_prefix("refused"));
  auto r0 = open_etcd(url, 0, 3);
  std::atomic<int> status{-1};
  std::string text;
  std::thread waiter([&] {
    try {
      r0->wait({"pstate/init/done"}, Deadline::after_ms(20000));
      status = PSTATE_OK;
    } catch (const Error &e) {
      text = e.what();
      status = e.status();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { open_etcd(url, 2, 4); }, PSTATE_ERR_MISMATCH, {"rank 2 says world_size 4, rank 0 says 3"});
  waiter.join();
  assert_true(seconds_since(t0) < 2.0);
  assert_int_equal(status.load(), PSTATE_ERR_MISMATCH);
  assert_non_null(std::strstr(text.c_str(), "the job cannot start: the store refused rank 2"));
  // abandon() tells them too (pstate_init gave up)
  const std::string url2 = url_of(fresh_prefix("abandon"));
  auto a0 = open_etcd(url2, 0, 2), a1 = open_etcd(url2, 1, 2);
  a1->abandon(PSTATE_ERR_TRANSPORT, "no network");
  expect_error([&] { a0->get("never", soon()); }, PSTATE_ERR_TRANSPORT, {"the job cannot start: rank 1 gave up: no network"});
}

void test_etcd_timeout_names_the_absent_ranks(void **) {
  const std::string url = url_of(fresh_prefix("absent"));
  auto r0 = open_etcd(url, 0, 4);
  auto r2 = open_etcd(url, 2, 4);
  auto r3 = open_etcd(url, 3, 4);
  assert_true(r3->close(soon()));
  expect_error([&] { r0->wait({"pstate/init/done"}, Deadline::after_ms(300)); }, PSTATE_ERR_TIMEOUT,
               {"rank 1 of 0..3 never connected", "rank 3 joined and left", "1 of 1 keys never set"});
}

// interrupt() from another thread ends a get that waits in a watch, and every later call.
void test_etcd_interrupt_ends_a_waiting_get_from_another_thread(void **) {
  const std::string url = url_of(fresh_prefix("interrupt"));
  auto store = open_etcd(url, 0, 1);
  std::atomic<int> status{-1};
  std::thread getter([&] {
    try {
      store->get("never", Deadline::after_ms(60000));
      status = PSTATE_OK;
    } catch (const Error &e) {
      status = e.status();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto t0 = std::chrono::steady_clock::now();
  store->interrupt();
  getter.join();
  assert_true(seconds_since(t0) < 1.0);
  assert_int_equal(status.load(), PSTATE_ERR_ABORTED);
  expect_error([&] { store->check("x", soon()); }, PSTATE_ERR_ABORTED, {"interrupted"});
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
      cmocka_unit_test(test_etcd_four_processes_set_get_add_wait_check),
      cmocka_unit_test(test_etcd_add_is_atomic_across_processes),
      cmocka_unit_test(test_etcd_set_if_absent_first_writer_wins),
      cmocka_unit_test(test_etcd_get_waits_for_a_later_set),
      cmocka_unit_test(test_etcd_get_past_deadline_is_timeout_naming_the_key),
      cmocka_unit_test(test_etcd_wrong_or_missing_token_is_auth_error),
      cmocka_unit_test(test_etcd_job_id_names_the_other_job),
      cmocka_unit_test(test_etcd_duplicate_rank_is_mismatch_naming_the_holder),
      cmocka_unit_test(test_etcd_killed_rank_leaves_members_within_the_ttl_and_can_be_claimed),
      cmocka_unit_test(test_etcd_watch_departures_tells_a_lapsed_lease_and_a_new_claim),
      cmocka_unit_test(test_etcd_members_are_the_ranks_with_a_live_lease),
      cmocka_unit_test(test_etcd_rank_outside_world_is_mismatch),
      cmocka_unit_test(test_etcd_world_size_disagreement_is_mismatch_naming_both_ranks),
      cmocka_unit_test(test_etcd_keys_binary_long_and_large_values_round_trip),
      cmocka_unit_test(test_etcd_erase_check_and_add_on_non_integer),
      cmocka_unit_test(test_etcd_refused_member_fails_the_waiting_ranks_at_once),
      cmocka_unit_test(test_etcd_timeout_names_the_absent_ranks),
      cmocka_unit_test(test_etcd_interrupt_ends_a_waiting_get_from_another_thread),
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
