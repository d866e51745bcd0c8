// test_store_contract.cpp — what every rendezvous store promises (store.hpp), one case each, run
// over the TCP store (rank 0 serves on a fresh port of 127.0.0.1), the file store (a fresh
// directory under /tmp) and the etcd store (a fresh prefix on a real etcd started here:
// tests/support/etcd_server.hpp). Ranks are forked processes and threads: set, get, add, wait,
// check, erase, set_if_absent; a get waiting for a later set; atomic add and first-writer-wins
// across processes; deadlines naming the keys and the absent ranks; job token, job id, rank
// claims (released when a process closes, dies or is destroyed), world size, observers,
// members(); refused members and abandon() failing the waiting ranks at once; interrupt().
//
// The binary runs the store its argument names (tcp, file or etcd; CTest runs it once per store:
// test_store_contract_tcp, _file, _etcd). Where a store says more than the others (the etcd store
// waits a lease TTL before it refuses a live holder, names its prefix; the TCP server names the
// connection), the case asks its traits. What only one store does — the TCP server's framing,
// pipelining and floods, the file store's locks and leftovers, etcd's leases, stalls and
// prefixes — is in test_store_tcp.cpp, test_store_file.cpp and test_store_etcd.cpp.
// Exits 77 (skipped) for etcd when no etcd binary is installed (`./build.sh deps` installs it).
#include "bootstrap/roster.hpp"
#include "bootstrap/tcp_store.hpp"
#ifdef PSTATE_HAVE_ETCD
#include "etcd_server.hpp"
#endif

#include <signal.h>

#include <atomic>
#include <memory>
#include <thread>

#include "store_test_util.hpp"  // last: it brings cmocka

using namespace pstate;
using pstest::ChildBody;
using pstest::expect_error;
using pstest::kLongMs;
using pstest::Pipe;
using pstest::Refusal;
using pstest::refusal_of;
using pstest::seconds_since;
using pstest::soon;

namespace {

// ---- the three stores ----------------------------------------------------------------------------

enum class Kind { kTcp, kFile, kEtcd };

// How a store differs where the contract lets it.
struct Traits {
  const char *name;
  bool lists_members;        // members() lists the live ranks (the file store cannot tell)
  bool frees_rank_at_once;   // a destroyed store's rank is free at once (etcd: within the lease TTL)
  bool refuses_at_once;      // a live holder's rank is refused at once (etcd: after its lease TTL + 1 s)
  bool says_last_seen;       // absent ranks come with "last seen: ..." (etcd: no)
  int lease_ttl_s;           // etcd: PSTATE_ETCD_LEASE_TTL_S of this test
  size_t big_value;          // a large value that must round-trip (etcd takes requests up to 1.5 MiB)
};

Kind g_kind = Kind::kTcp;
#ifdef PSTATE_HAVE_ETCD
pstest::EtcdServer *g_etcd = nullptr;
#endif

const Traits &traits() {
  static const Traits kTcp{"tcp", true, true, true, true, 0, size_t{8} << 20};
  static const Traits kFile{"file", false, true, true, true, 0, size_t{1} << 20};
  static const Traits kEtcd{"etcd", true, false, false, false, 2, size_t{512} << 10};
  return g_kind == Kind::kTcp ? kTcp : g_kind == Kind::kFile ? kFile : kEtcd;
}

// How a store names the process that holds a rank, in a refusal of a second claim.
std::string holder_words(pid_t holder) {
  if (g_kind == Kind::kTcp) return "(connected from 127.0.0.1:";
  return "(pid " + std::to_string(holder);
}

// One job's store for one test: a port that rank 0 serves (tcp), a fresh directory (file), a fresh
// prefix (etcd). Made before any fork, so that the parent and its children open ranks of one job.
// Rank 0 opens first: a TCP rank 0 serves on a free port and tells it to the `tell` processes
// that were forked before it (their open reads it); later forks and threads know it already.
class Place {
 public:
  explicit Place(const char *name) {
    switch (g_kind) {
      case Kind::kTcp:
        break;
      case Kind::kFile:
        url_ = "file://" + dir_.path() + "/store";  // the store makes it (the last rank out removes it)
        break;
      case Kind::kEtcd: {
#ifdef PSTATE_HAVE_ETCD
        static int n = 0;
        prefix_ = cat("pstest/", name, "-", ::getpid(), "-", ++n);
        url_ = cat("etcd://", g_etcd->endpoint(), "/", prefix_);
#endif
        break;
      }
    }
    (void)name;
  }

  StoreOptions options(int rank, int world, const std::string &token = "") {
    StoreOptions o = pstest::store_options(url_, rank, world, token);
    if (g_kind == Kind::kTcp && url_.empty()) {
      if (rank == 0)
        o.init_method = "tcp://127.0.0.1:0";
      else
        o.init_method = url_ = read_url();
    }
    return o;
  }

  std::unique_ptr<Store> open(const StoreOptions &o, int tell = 0) {
    std::unique_ptr<Store> store = open_store(o, Logger(LogLevel::kNone));
    if (g_kind == Kind::kTcp && o.rank == 0 && o.init_method == "tcp://127.0.0.1:0") {
      url_ = store->describe();
      int port = static_cast<TcpStore &>(*store).port();
      for (int i = 0; i < tell; ++i) (void)!::write(port_.fds[1], &port, sizeof port);
    }
    return store;
  }
  std::unique_ptr<Store> open(int rank, int world, const std::string &token = "", int tell = 0) {
    return open(options(rank, world, token), tell);
  }

  const std::string &url() const { return url_; }
  const std::string &prefix() const { return prefix_; }  // etcd

 private:
  std::string read_url() {
    int port = -1;
    pollfd p{port_.fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(kLongMs)) != 1 || ::read(port_.fds[0], &port, sizeof port) != sizeof port)
      throw_error(PSTATE_ERR_TIMEOUT, "test: rank 0 never told its port");
    return cat("tcp://127.0.0.1:", port);
  }

  pstest::TempDir dir_;
  std::string url_;  // tcp: "" until rank 0 serves
  std::string prefix_;
  Pipe port_;        // tcp: rank 0's port, to processes forked before it served
};

// Runs the ranks of a world as forked processes, each with its store open, then closes each
// (a serving rank 0 waits in its close until the others have left).
void run_ranks(Place &place, int world, const std::string &token, const std::function<int(int, Store &)> &body) {
  pstest::run_children(
      world,
      [&](int rank) -> int {
        auto store = place.open(rank, world, token, rank == 0 ? world - 1 : 0);
        int rc = body(rank, *store);
        CHILD_CHECK(store->close(soon()));
        return rc;
      },
      60000);
}

// Forks the process of one rank before this one starts threads of its own (pstest::wait_for_go):
// it opens its rank when told `go` (a TCP rank learns rank 0's port then), runs body, and exits
// with body's result.
pid_t fork_rank(Place &place, int rank, int world, Pipe &go, const std::function<int(Store &)> &body) {
  ChildBody child = [&](int) -> int {
    if (!go.await()) return 1;
    auto store = place.open(rank, world);
    return body(*store);
  };
  return pstest::fork_child(child, rank);
}

std::vector<int> members_of(Store &store) { return store.members(soon()).value_or(std::vector<int>{}); }

// Polls members() until it is `want` or `within_s` passed; returns what it last saw.
std::vector<int> members_become(Store &store, const std::vector<int> &want, double within_s) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int> now = members_of(store);
  while (now != want && seconds_since(t0) < within_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    now = members_of(store);
  }
  return now;
}

// ---- ranks meeting -----------------------------------------------------------------------------

void test_four_processes_set_get_add_wait_check(void **) {
  constexpr int kWorld = 4;
  Place place("four");
  run_ranks(place, kWorld, "job-secret", [](int rank, Store &store) -> int {
    store.add("arrived", 1, soon());  // before the set, so every value seen implies its add
    store.set("value/" + std::to_string(rank), bytes_of("from rank " + std::to_string(rank)), soon());
    std::vector<std::string> keys;
    for (int r = 0; r < kWorld; ++r) keys.push_back("value/" + std::to_string(r));
    store.wait(keys, soon());
    for (int r = 0; r < kWorld; ++r) {
      CHILD_CHECK(store.check(keys[r], soon()));
      CHILD_CHECK(text_of(store.get(keys[r], soon())) == "from rank " + std::to_string(r));
    }
    CHILD_CHECK(!store.check("value/never", soon()));
    CHILD_CHECK(text_of(store.get("arrived", soon())) == "4");
    store_barrier(store, "done", kWorld, soon());
    return 0;
  });
}

void test_four_threads_as_ranks_meet_at_a_barrier(void **) {
  constexpr int kWorld = 4;
  Place place("threads");
  auto rank0 = place.open(0, kWorld);
  std::atomic<int> passed{0};
  std::vector<std::thread> threads;
  for (int rank = 1; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto store = place.open(rank, kWorld);
        store->set("t/" + std::to_string(rank), bytes_of("x"), soon());
        store_barrier(*store, "threads", kWorld, soon());
        if (store->check("t/1", soon()) && store->check("t/2", soon()) && store->check("t/3", soon())) ++passed;
        store->close(soon());
      } catch (const Error &e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
    });
  }
  store_barrier(*rank0, "threads", kWorld, soon());
  for (auto &t : threads) t.join();
  assert_int_equal(passed.load(), kWorld - 1);
  assert_true(rank0->close(soon()));
}

// Every rank opens before any adds (a file store opened by a rank after all the others had
// finished and exited is an earlier job's leftover to it, reclaimed with the counter).
void test_add_is_atomic_across_processes(void **) {
  constexpr int kWorld = 4, kAdds = 25;
  Place place("add");
  run_ranks(place, kWorld, "", [](int, Store &store) -> int {
    store_barrier(store, "opened", kWorld, soon());
    for (int i = 0; i < kAdds; ++i) store.add("counter", 1, soon());
    store_barrier(store, "added", kWorld, soon());
    CHILD_CHECK(text_of(store.get("counter", soon())) == std::to_string(kWorld * kAdds));
    store_barrier(store, "read", kWorld, soon());
    return 0;
  });
}

// set_if_absent across processes: one winner per round, the same value for every caller (the
// survivors' agreement of pstate_shrink).
void test_set_if_absent_first_writer_wins(void **) {
  constexpr int kWorld = 4, kRounds = 20;
  Place place("race");
  run_ranks(place, kWorld, "", [](int rank, Store &store) -> int {
    store_barrier(store, "start", kWorld, soon());
    for (int round = 0; round < kRounds; ++round) {
      std::string key = "race/" + std::to_string(round);
      std::string got = text_of(store.set_if_absent(key, bytes_of("rank " + std::to_string(rank)), soon()));
      CHILD_CHECK(got.rfind("rank ", 0) == 0);
      store.set("saw/" + std::to_string(round) + "/" + std::to_string(rank), bytes_of(got), soon());
      if (got == "rank " + std::to_string(rank)) store.add("winners/" + std::to_string(round), 1, soon());
    }
    store_barrier(store, "raced", kWorld, soon());
    for (int round = 0; round < kRounds; ++round) {
      CHILD_CHECK(text_of(store.get("winners/" + std::to_string(round), soon())) == "1");
      std::string first = text_of(store.get("saw/" + std::to_string(round) + "/0", soon()));
      for (int r = 1; r < kWorld; ++r)
        CHILD_CHECK(text_of(store.get("saw/" + std::to_string(round) + "/" + std::to_string(r), soon())) == first);
    }
    store_barrier(store, "done", kWorld, soon());
    return 0;
  });
}

// In one process: the loser gets the winner's value, an empty value can win, a waiting get wakes.
void test_set_if_absent_gives_the_winners_value_and_wakes_a_get(void **) {
  Place place("sia");
  auto rank0 = place.open(0, 2);
  auto rank1 = place.open(1, 2);
  assert_string_equal(text_of(rank0->set_if_absent("k", bytes_of("first"), soon())).c_str(), "first");
  assert_string_equal(text_of(rank1->set_if_absent("k", bytes_of("second"), soon())).c_str(), "first");
  assert_true(rank1->set_if_absent("empty", Bytes{}, soon()).empty());
  assert_true(rank0->set_if_absent("empty", bytes_of("x"), soon()).empty());
  std::string got;
  std::thread waiter([&] { got = text_of(rank1->get("later", soon())); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  rank0->set_if_absent("later", bytes_of("woke"), soon());
  waiter.join();
  assert_string_equal(got.c_str(), "woke");
}

void test_get_waits_for_a_later_set(void **) {
  Place place("later");
  Pipe go, about_to_get;
  pid_t child = fork_rank(place, 1, 2, go, [&](Store &store) -> int {
    CHILD_CHECK(!store.check("late", soon()));
    about_to_get.signal();
    CHILD_CHECK(text_of(store.get("late", soon())) == "worth the wait");
    return store.close(soon()) ? 0 : 1;
  });
  auto rank0 = place.open(0, 2, "", 1);
  go.signal();
  assert_true(about_to_get.await());
  rank0->set("late", bytes_of("worth the wait"), soon());
  assert_int_equal(pst_wait(child, kLongMs), 0);
  assert_true(rank0->close(soon()));
}

// ---- deadlines ---------------------------------------------------------------------------------

void test_get_and_wait_past_their_deadline_name_the_keys(void **) {
  Place place("deadline");
  auto store = place.open(0, 1);
  expect_error([&] { store->get("never/set", Deadline::after_ms(100)); }, PSTATE_ERR_TIMEOUT,
               {"get('never/set')", "waiting for key 'never/set'", place.url()});
  store->set("here", bytes_of("1"), soon());
  expect_error([&] { store->wait({"here", "missing/a", "missing/b"}, Deadline::after_ms(100)); }, PSTATE_ERR_TIMEOUT,
               {"2 of 3 keys never set: 'missing/a', 'missing/b'"});
  // The store serves on afterwards.
  store->set("after", bytes_of("ok"), soon());
  assert_string_equal(text_of(store->get("after", soon())).c_str(), "ok");
}

// A get or wait whose deadline had passed before it was called (a deadline shared by several
// steps, as the rendezvous' is, used up by the earlier ones) says so, instead of "timed out after
// 0 ms" (issue 44); one that waited says how long.
void test_a_deadline_passed_before_the_call_is_said_so(void **) {
  Place place("spent");
  auto store = place.open(0, 1);
  const Deadline spent = Deadline::after_ms(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (int call = 0; call < 2; ++call) {
    std::string msg;
    try {
      if (call == 0)
        store->get("never/set", spent);
      else
        store->wait({"never/set"}, spent);
    } catch (const Error &e) {
      assert_int_equal(e.status(), PSTATE_ERR_TIMEOUT);
      msg = e.what();
    }
    std::fprintf(stderr, "%s with a spent deadline: %s\n", call == 0 ? "get" : "wait", msg.c_str());
    assert_true(msg.find("its deadline had passed") != std::string::npos);
    assert_true(msg.find("after 0 ms") == std::string::npos);
  }
  expect_error([&] { store->get("never/set", Deadline::after_ms(100)); }, PSTATE_ERR_TIMEOUT, {"timed out after "});
}

// A wait that times out names the ranks that never came, then the ones that came and left.
void test_timeout_names_the_absent_ranks(void **) {
  Place place("absent");
  auto r0 = place.open(0, 4);
  auto r2 = place.open(2, 4);
  auto r3 = place.open(3, 4);
  const std::string last_seen_none = traits().says_last_seen ? "; last seen: none" : "";
  expect_error([&] { r0->wait({"pstate/init/done"}, Deadline::after_ms(150)); }, PSTATE_ERR_TIMEOUT,
               {"rank 1 of 0..3 never connected" + last_seen_none, "1 of 1 keys never set"});
  assert_true(r3->close(soon()));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the TCP server reads the close
  expect_error([&] { r0->wait({"pstate/init/done"}, Deadline::after_ms(150)); }, PSTATE_ERR_TIMEOUT,
               {"rank 1 of 0..3 never connected; rank 3 joined and left",
                traits().says_last_seen ? "last seen: rank 3 left" : "1 of 1 keys never set"});
}

// ---- job token, job id -------------------------------------------------------------------------

// A process with another job token (or none) is AUTH, one of another job (PSTATE_JOB_ID) is
// MISMATCH naming both jobs; none of them takes the rank. The three try at once (an etcd store
// refuses only once the job's leases outlived their TTL: it might have been a job that just ended).
void test_another_token_or_job_id_is_refused(void **) {
  Place place("token");
  auto with = [&](const std::string &token, const std::string &job_id) {
    StoreOptions o = place.options(1, 2, token);
    o.job_id = job_id;
    return o;
  };
  StoreOptions job = place.options(0, 2, "right-token");
  job.job_id = "job-a";
  auto rank0 = place.open(job);
  Refusal wrong, none, other_job;
  std::thread t1([&] { wrong = refusal_of([&] { place.open(with("wrong-token", "job-a")); }); });
  std::thread t2([&] { none = refusal_of([&] { place.open(with("", "job-a")); }); });
  std::thread t3([&] { other_job = refusal_of([&] { place.open(with("right-token", "job-b")); }); });
  t1.join();
  t2.join();
  t3.join();
  assert_int_equal(wrong.status, PSTATE_ERR_AUTH);
  assert_true(wrong.has("job token refused by the store at " + place.url()) && wrong.has("set PSTATE_JOB_TOKEN"));
  assert_int_equal(none.status, PSTATE_ERR_AUTH);
  assert_true(none.has("job token refused"));
  if (g_kind == Kind::kTcp) assert_true(none.has("requires a job token") && none.has("PSTATE_JOB_TOKEN"));
  if (g_kind == Kind::kEtcd)
    assert_true(wrong.has("the prefix '" + place.prefix() + "' holds a job") && wrong.has("a prefix of its own"));
  assert_int_equal(other_job.status, PSTATE_ERR_MISMATCH);
  assert_true(other_job.has("belongs to job 'job-a'") && other_job.has("job 'job-b'"));
  auto rank1 = place.open(with("right-token", "job-a"));  // the refused attempts did not take rank 1
  assert_non_null(rank1.get());
}

// ---- rank claims, world size, observers ------------------------------------------------------------

// A second claim of a live rank is refused, naming the holder; once every rank has joined, such a
// refusal ends nothing (a late duplicate is a stranger now: the job goes on). The rank is free
// again for a replacement when its holder closes, and (tcp, file) when its store is destroyed.
void test_duplicate_rank_is_mismatch_naming_the_holder(void **) {
  Place place("dup");
  auto rank0 = place.open(0, 2);
  auto first = place.open(1, 2);
  Refusal second_claim = refusal_of([&] { place.open(1, 2); });
  assert_int_equal(second_claim.status, PSTATE_ERR_MISMATCH);
  assert_true(second_claim.has("rank 1 is already taken by another process " + holder_words(::getpid())));
  if (g_kind == Kind::kEtcd) assert_true(second_claim.has("etcd lease"));
  first->set("k", bytes_of("v"), soon());
  assert_string_equal(text_of(rank0->get("k", soon())).c_str(), "v");
  assert_true(first->close(soon()));  // released on close, at once
  expect_error([&] { first->get("k", soon()); }, PSTATE_ERR_INVALID_STATE, {"closed by this rank"});
  StoreOptions replacement = place.options(1, 2);
  replacement.rejoin = true;  // PSTATE_REJOIN=1: rank 1 joined this job before
  auto t0 = std::chrono::steady_clock::now();
  auto second = place.open(replacement);
  if (g_kind == Kind::kEtcd) assert_true(seconds_since(t0) < 1.0);  // the lease was revoked: no TTL to wait
  if (!traits().frees_rank_at_once) return;  // etcd: within the lease TTL (the killed-process case)
  second.reset();  // ...and on destruction (its process ended)
  auto third = place.open(replacement);
  assert_non_null(third.get());
}

// A killed rank's claim goes with it: a replacement claims the rank (etcd: once the dead holder's
// lease lapsed, within its TTL), and members() follows. (While it lives, a second claim is
// refused naming it; the world is complete, so the job goes on.)
void test_rank_of_a_killed_process_can_be_claimed_again(void **) {
  Place place("killed");
  Pipe go, claimed;
  pid_t child = fork_rank(place, 1, 2, go, [&](Store &) -> int {
    claimed.signal();
    ::sleep(120);  // until killed
    return 0;
  });
  auto rank0 = place.open(0, 2, "", 1);
  go.signal();
  assert_true(claimed.await());
  if (traits().lists_members) assert_true(members_of(*rank0) == (std::vector<int>{0, 1}));
  if (traits().refuses_at_once)
    expect_error([&] { place.open(1, 2); }, PSTATE_ERR_MISMATCH, {"rank 1 is already taken", "pid " + std::to_string(child)});
  ::kill(child, SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  assert_int_equal(pst_wait(child, kLongMs), 128 + SIGKILL);
  StoreOptions o = place.options(1, 2);
  o.rejoin = true;  // PSTATE_REJOIN=1: it replaces a dead rank of a running job
  auto again = place.open(o);
  const double claimed_after = seconds_since(t0);
  std::printf("rank 1 claimed again %.2f s after its holder was killed\n", claimed_after);
  if (traits().lease_ttl_s) assert_true(claimed_after <= traits().lease_ttl_s + 1.5);
  if (!traits().lists_members) return;
  assert_true(members_of(*rank0) == (std::vector<int>{0, 1}));
  again.reset();  // destroyed without close: gone at once (etcd: its lease lapses within the TTL)
  auto t1 = std::chrono::steady_clock::now();
  std::vector<int> after = members_become(*rank0, {0}, traits().lease_ttl_s + 3.0);
  std::printf("members() dropped the vanished rank %.2f s after it stopped\n", seconds_since(t1));
  assert_true(after == (std::vector<int>{0}));
  if (traits().lease_ttl_s) assert_true(seconds_since(t1) <= traits().lease_ttl_s + 1.0);
}

// members(): the ranks live now, ascending, as every client (observers too) sees them; a rank
// that leaves is gone from the answer at once.
void test_members_are_the_live_ranks(void **) {
  Place place("members");
  auto rank0 = place.open(0, 4);
  auto rank3 = place.open(3, 4);
  auto rank1 = place.open(1, 4);
  auto observer = place.open(-1, 0);
  if (!traits().lists_members) {  // the file store cannot tell
    assert_false(rank3->members(soon()).has_value());
    return;
  }
  assert_true(members_of(*rank3) == (std::vector<int>{0, 1, 3}));
  assert_true(members_of(*observer) == (std::vector<int>{0, 1, 3}));
  if (traits().frees_rank_at_once)
    rank1.reset();  // its process ended
  else
    assert_true(rank1->close(soon()));  // etcd: close revokes the lease
  assert_true(members_become(*rank3, {0, 3}, 1.0) == (std::vector<int>{0, 3}));
  assert_true(members_of(*rank0) == (std::vector<int>{0, 3}));
}

// Refused as the first process of a job (a TCP store needs its rank 0 first) and as one joining it.
void test_rank_outside_world_is_mismatch(void **) {
  const std::string why = "rank 5 is out of range for world_size 4 (ranks are 0..3)";
  if (g_kind != Kind::kTcp) {
    Place first("outside-first");
    expect_error([&] { first.open(5, 4); }, PSTATE_ERR_MISMATCH, {why});
  }
  Place place("outside");
  auto rank0 = place.open(0, 4);
  expect_error([&] { place.open(5, 4); }, PSTATE_ERR_MISMATCH, {why});
}

void test_world_size_disagreement_is_mismatch_naming_both_ranks(void **) {
  Place place("world");
  auto rank0 = place.open(0, 4);
  expect_error([&] { place.open(3, 8); }, PSTATE_ERR_MISMATCH, {"rank 3 says world_size 8, rank 0 says 4"});
}

void test_observer_reads_without_claiming_a_rank(void **) {
  Place place("observer");
  auto rank0 = place.open(0, 2);
  rank0->set("shared", bytes_of("hello"), soon());
  auto observer = place.open(-1, 0);
  if (auto *tcp = dynamic_cast<TcpStore *>(observer.get())) assert_int_equal(tcp->world_size(), 2);
  assert_string_equal(text_of(observer->get("shared", soon())).c_str(), "hello");
  auto rank1 = place.open(1, 2);  // rank 1 is still free
  assert_non_null(rank1.get());
}

// ---- keys, values, operations ----------------------------------------------------------------------

void test_keys_binary_long_and_large_values_round_trip(void **) {
  Place place("keys");
  auto rank0 = place.open(0, 2);
  auto rank1 = place.open(1, 2);
  std::string long_a(4096, 'a'), long_b = long_a;
  long_b.back() = 'b';
  std::vector<std::string> keys = {"a/b", "a%2Fb", "a_b", std::string("bin\0\x01\xff/..\n", 10), "..", ".", long_a, long_b};
  for (size_t i = 0; i < keys.size(); ++i) rank1->set(keys[i], bytes_of("v" + std::to_string(i)), soon());
  for (size_t i = 0; i < keys.size(); ++i)
    assert_string_equal(text_of(rank0->get(keys[i], soon())).c_str(), ("v" + std::to_string(i)).c_str());
  assert_false(rank0->check("a", soon()));
  Bytes big(traits().big_value);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  rank1->set("big", big, soon());
  assert_true(rank0->get("big", soon()) == big);
  assert_true(rank1->get("big", soon()) == big);
  expect_error([&] { rank1->set("too/big", Bytes(kStoreMaxValueBytes + 1), soon()); }, PSTATE_ERR_INVALID_ARGUMENT,
               {"'too/big'", "64 MiB"});
  expect_error([&] { rank1->set(std::string(5000, 'k'), Bytes{1}, soon()); }, PSTATE_ERR_INVALID_ARGUMENT, {"5000 bytes"});
  rank1->set("small", Bytes{}, soon());  // empty values are fine
  assert_true(rank0->get("small", soon()).empty());
}

void test_add_erase_check_and_what_add_refuses(void **) {
  Place place("ops");
  auto store = place.open(0, 1);
  assert_int_equal(store->add("n", 5, soon()), 5);
  assert_int_equal(store->add("n", -7, soon()), -2);
  assert_string_equal(text_of(store->get("n", soon())).c_str(), "-2");
  store->set("word", bytes_of("hello"), soon());
  expect_error([&] { store->add("word", 1, soon()); }, PSTATE_ERR_INVALID_ARGUMENT, {"not a decimal integer"});
  store->set("max", bytes_of(std::to_string(INT64_MAX)), soon());
  expect_error([&] { store->add("max", 1, soon()); }, PSTATE_ERR_INVALID_ARGUMENT, {"overflows"});
  assert_int_equal(store->add("n", 1, soon()), -1);  // the store serves on after the refusals
  assert_string_equal(text_of(store->set_if_absent("word", bytes_of("other"), soon())).c_str(), "hello");
  assert_false(store->check("e", soon()));
  store->set("e", bytes_of("text"), soon());
  assert_true(store->check("e", soon()));
  assert_true(store->erase("e", soon()));
  assert_false(store->erase("e", soon()));
  assert_false(store->check("e", soon()));
  assert_int_equal(store->add("e", 7, soon()), 7);
}

// ---- a job that cannot start ---------------------------------------------------------------------

// A process of the job refused for its claim (here: another world size) before the world is
// complete ends the job: the ranks waiting in the store hear it at once, with its reason, and so
// does every later request.
void test_refused_member_fails_the_waiting_ranks_at_once(void **) {
  Place place("refused");
  auto rank0 = place.open(0, 3);
  auto rank1 = place.open(1, 3);
  Refusal waited;
  std::thread waiter([&] { waited = refusal_of([&] { rank1->wait({"pstate/init/done"}, Deadline::after_ms(20000)); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { place.open(2, 4); }, PSTATE_ERR_MISMATCH, {"rank 2 says world_size 4, rank 0 says 3"});
  waiter.join();
  assert_true(seconds_since(t0) < 2.0);
  assert_int_equal(waited.status, PSTATE_ERR_MISMATCH);
  assert_true(waited.has("the job cannot start: the store refused rank 2"));
  assert_true(waited.has("rank 2 says world_size 4, rank 0 says 3"));
  expect_error([&] { rank0->get("x", soon()); }, PSTATE_ERR_MISMATCH, {"the job cannot start"});
}

// abandon() (pstate_init gave up) tells the others too.
void test_abandon_fails_the_waiting_ranks(void **) {
  Place place("abandon");
  auto a0 = place.open(0, 2);
  auto a1 = place.open(1, 2);
  a1->abandon(PSTATE_ERR_TRANSPORT, "no network");
  expect_error([&] { a0->get("never", soon()); }, PSTATE_ERR_TRANSPORT, {"the job cannot start: rank 1 gave up: no network"});
}

// ---- interrupt -----------------------------------------------------------------------------------

// interrupt() from another thread ends a get that waits, and every later call.
void test_interrupt_ends_a_waiting_get_from_another_thread(void **) {
  Place place("interrupt");
  auto store = place.open(0, 1);
  Refusal got;
  std::thread getter([&] { got = refusal_of([&] { store->get("never", Deadline::after_ms(60000)); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // it waits (if not yet: interrupt is sticky)
  auto t0 = std::chrono::steady_clock::now();
  store->interrupt();
  getter.join();
  assert_true(seconds_since(t0) < 1.0);
  assert_int_equal(got.status, PSTATE_ERR_ABORTED);
  expect_error([&] { store->get("never", soon()); }, PSTATE_ERR_ABORTED, {"interrupted"});
}

// interrupt() before the call: the call fails at once, without a wait (nothing is parked).
void test_interrupt_before_a_call_fails_it_at_once(void **) {
  Place place("interrupted");
  auto rank0 = place.open(0, 1);
  auto observer = place.open(-1, 0);
  observer->interrupt();
  auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { observer->get("never/set", Deadline::never()); }, PSTATE_ERR_ABORTED, {"interrupted"});
  assert_true(seconds_since(t0) < 1.0);
  if (auto *tcp = dynamic_cast<TcpStore *>(rank0.get())) assert_int_equal(tcp->server()->stats().parked_requests, 0);
}

}  // namespace

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  alarm(600);  // the whole file, in the worst case; each test bounds itself far below this
  const std::string kind = argc > 1 ? argv[1] : "";
  if (kind == "tcp") {
    g_kind = Kind::kTcp;
  } else if (kind == "file") {
    g_kind = Kind::kFile;
  } else if (kind == "etcd") {
    g_kind = Kind::kEtcd;
  } else {
    std::fprintf(stderr, "usage: %s tcp|file|etcd\n", argv[0]);
    return 2;
  }
#ifdef PSTATE_HAVE_ETCD
  pstest::EtcdServer etcd;
  if (g_kind == Kind::kEtcd) {
    if (!etcd.start()) {
      std::printf("SKIPPED: no etcd binary (install etcd-server: ./build.sh deps)\n");
      return 77;
    }
    g_etcd = &etcd;
    setenv("PSTATE_ETCD_LEASE_TTL_S", std::to_string(traits().lease_ttl_s).c_str(), 1);
  }
#else
  if (g_kind == Kind::kEtcd) {
    std::printf("SKIPPED: this libpstate was built without the etcd store\n");
    return 77;
  }
#endif
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_four_processes_set_get_add_wait_check),
      cmocka_unit_test(test_four_threads_as_ranks_meet_at_a_barrier),
      cmocka_unit_test(test_add_is_atomic_across_processes),
      cmocka_unit_test(test_set_if_absent_first_writer_wins),
      cmocka_unit_test(test_set_if_absent_gives_the_winners_value_and_wakes_a_get),
      cmocka_unit_test(test_get_waits_for_a_later_set),
      cmocka_unit_test(test_get_and_wait_past_their_deadline_name_the_keys),
      cmocka_unit_test(test_a_deadline_passed_before_the_call_is_said_so),
      cmocka_unit_test(test_timeout_names_the_absent_ranks),
      cmocka_unit_test(test_another_token_or_job_id_is_refused),
      cmocka_unit_test(test_duplicate_rank_is_mismatch_naming_the_holder),
      cmocka_unit_test(test_rank_of_a_killed_process_can_be_claimed_again),
      cmocka_unit_test(test_members_are_the_live_ranks),
      cmocka_unit_test(test_rank_outside_world_is_mismatch),
      cmocka_unit_test(test_world_size_disagreement_is_mismatch_naming_both_ranks),
      cmocka_unit_test(test_observer_reads_without_claiming_a_rank),
      cmocka_unit_test(test_keys_binary_long_and_large_values_round_trip),
      cmocka_unit_test(test_add_erase_check_and_what_add_refuses),
      cmocka_unit_test(test_refused_member_fails_the_waiting_ranks_at_once),
      cmocka_unit_test(test_abandon_fails_the_waiting_ranks),
      cmocka_unit_test(test_interrupt_ends_a_waiting_get_from_another_thread),
      cmocka_unit_test(test_interrupt_before_a_call_fails_it_at_once),
  };
  if (const char *only = std::getenv("PSTATE_TEST_FILTER")) cmocka_set_test_filter(only);  // e.g. "*token*"
  int failed = cmocka_run_group_tests_name(traits().name, tests, nullptr, nullptr);
#ifdef PSTATE_HAVE_ETCD
  g_etcd = nullptr;
#endif
  return failed;
}
