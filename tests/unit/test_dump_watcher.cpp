// test_dump_watcher.cpp — flight-recorder dumps asked for through the job's store (issue 27,
// group/dump_watcher.hpp), against a real TCP store on 127.0.0.1: a request (add the count, set
// the n-th key) makes the watcher dump its recorder with the request's text as the reason, once
// per request, while another thread keeps recording (the race CI runs under ThreadSanitizer); a
// late watcher of a new job answers a request made before it was up, a replacement's (its first
// request given) only later ones; stop() ends a watcher parked in its get (the server lets the
// parked request go), one still connecting, and is idempotent; a watcher whose store goes away,
// or cannot be reached, ends by itself; its thread blocks every signal (a signal sent to the
// process lands in a thread of the program, as without pstate). Every wait is bounded, so a bug fails a test instead of
// hanging it.
#include "bootstrap/init_method.hpp"
#include "bootstrap/tcp_store.hpp"
#include "bootstrap/tcp_store_server.hpp"
#include "common/trace.hpp"
#include "group/dump_watcher.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "store_test_util.hpp"  // last: it brings cmocka

using namespace pstate;

namespace {

constexpr int64_t kLongMs = 30000;

struct Job {
  std::unique_ptr<TcpStoreServer> server;
  InitMethod method;
  StoreOptions options;  // a rank's options for the job's store

  Job() {
    StoreServerOptions so;
    so.world_size = 1;
    so.owner_rank = -1;  // served by a launcher, as by `pstate run`
    so.job_token = "dump-token";
    so.job_id = "dump-job";
    server = TcpStoreServer::start(so, Logger(LogLevel::kNone));
    method.kind = InitMethod::Kind::kTcp;
    method.host = "127.0.0.1";
    method.port = server->port();
    options.init_method = method.url();
    options.rank = 0;
    options.world_size = 1;
    options.job_token = so.job_token;
    options.job_id = so.job_id;
    options.timeout_ms = kLongMs;
    options.serve = false;
  }

  // What `pstate run` does (cli/job_store_client.cpp): the next number, then its key.
  void request(const std::string &why) {
    StoreOptions o = options;
    o.rank = -1;
    auto client = TcpStore::open(o, method, Logger(LogLevel::kNone));
    const int64_t n = client->add(DumpWatcher::kCountKey, 1, Deadline::after_ms(kLongMs));
    client->set(DumpWatcher::request_key(n), Bytes(why.begin(), why.end()), Deadline::after_ms(kLongMs));
  }

  size_t parked() const { return server->stats().parked_requests; }
};

std::unique_ptr<TraceRecorder> recorder_in(const std::string &dir) {
  auto r = std::make_unique<TraceRecorder>(64, dir);
  TraceFacts f;
  f.job = "dump-job";
  f.rank = 0;
  f.world = 1;
  r->set_facts(f);
  return r;
}

std::string reason_in(const std::string &file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("reason ", 0) == 0) return line.substr(7);
  return "";
}

// Polls cond every millisecond until it holds; fails the test if it does not within kLongMs.
template <typename Cond>
void wait_until(Cond cond) {
  Deadline d = Deadline::after_ms(kLongMs);
  while (!cond()) {
    assert_false(d.expired());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void test_each_request_is_one_dump_with_its_reason_while_the_rank_records(void **) {
  Job job;
  pstest::TempDir dir;
  auto rec = recorder_in(dir.path());
  TraceGroup *g = rec->add_group("world:0", {0}, 0);
  std::atomic<bool> stop{false};
  std::thread rank([&] {  // the rank's own thread records while the watcher dumps
    while (!stop.load()) {
      const uint64_t id = rec->begin(TraceClass::kColl, TraceOp::kAllReduce, g, TraceRecorder::next_coll(g), 8, 7,
                                     0, -1, -1, TracePath::kShm);
      rec->completed(id);
    }
  });
  DumpWatcher watcher(job.options, job.method, *rec, Logger(LogLevel::kNone));
  const std::string file = dir.path() + "/rank0.pstate-trace";
  job.request("pstate run: rank 3 exited with status 1");
  wait_until([&] { return exists(file); });
  assert_string_equal(reason_in(file).c_str(), "a request through the store (pstate run: rank 3 exited with status 1)");
  // the next request is the next dump; the watcher then parks for the one after
  wait_until([&] { return job.parked() == 1; });
  ::unlink(file.c_str());
  job.request("second\ttext");
  wait_until([&] { return exists(file); });
  assert_string_equal(reason_in(file).c_str(), "a request through the store (second text)");
  stop = true;
  rank.join();
  wait_until([&] { return job.parked() == 1; });
  watcher.stop();  // interrupts the parked get
  wait_until([&] { return job.parked() == 0; });
  watcher.stop();  // idempotent
}

void test_a_late_rank_answers_an_earlier_request_and_a_replacement_does_not(void **) {
  Job job;
  pstest::TempDir early_dir, late_dir;
  auto early = recorder_in(early_dir.path());
  auto late = recorder_in(late_dir.path());
  const std::string early_file = early_dir.path() + "/rank0.pstate-trace";
  const std::string late_file = late_dir.path() + "/rank0.pstate-trace";
  // a rank of a new job whose watcher comes up after the launcher asked: it answers
  job.request("one");
  DumpWatcher first(job.options, job.method, *early, Logger(LogLevel::kNone));
  wait_until([&] { return exists(early_file) && job.parked() == 1; });
  assert_string_equal(reason_in(early_file).c_str(), "a request through the store (one)");
  job.request("two");
  wait_until([&] { return reason_in(early_file) == "a request through the store (two)" && job.parked() == 1; });
  // a replacement's watcher starts after the requests counted when it joined (Context reads the
  // count): once it is parked (for request 3) it would have dumped for 1 and 2 already
  DumpWatcher second(job.options, job.method, *late, Logger(LogLevel::kNone), 3);
  wait_until([&] { return job.parked() == 2; });
  assert_false(exists(late_file));
  job.request("three");
  wait_until([&] { return exists(late_file) && reason_in(early_file) == "a request through the store (three)"; });
  assert_string_equal(reason_in(late_file).c_str(), "a request through the store (three)");
}

// Each thread of this process (tid) and whether it blocks SIGUSR1, from /proc/self/task/*/status.
std::map<std::string, bool> threads_blocking_sigusr1() {
  std::map<std::string, bool> out;
  DIR *d = ::opendir("/proc/self/task");
  assert_non_null(d);
  while (const dirent *e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream status(std::string("/proc/self/task/") + e->d_name + "/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("SigBlk:", 0) == 0)
        out[e->d_name] = (std::stoull(line.substr(7), nullptr, 16) & (1ull << (SIGUSR1 - 1))) != 0;
  }
  ::closedir(d);
  return out;
}

void test_the_watcher_thread_takes_no_signal_of_the_program(void **) {
  Job job;
  pstest::TempDir dir;
  auto rec = recorder_in(dir.path());
  const auto before = threads_blocking_sigusr1();
  DumpWatcher watcher(job.options, job.method, *rec, Logger(LogLevel::kNone));
  wait_until([&] { return job.parked() == 1; });  // its thread is up and waiting
  int fresh = 0;
  for (const auto &[tid, blocks] : threads_blocking_sigusr1()) {
    if (before.count(tid) != 0) continue;
    ++fresh;
    if (!blocks) std::fprintf(stderr, "thread %s, new since the watcher started, takes SIGUSR1\n", tid.c_str());
    assert_true(blocks);
  }
  assert_int_equal(fresh, 1);  // the watcher's thread
}

void test_a_watcher_ends_when_its_store_goes_away(void **) {
  Job job;
  pstest::TempDir dir;
  auto rec = recorder_in(dir.path());
  DumpWatcher watcher(job.options, job.method, *rec, Logger(LogLevel::kNone));
  wait_until([&] { return job.parked() == 1; });
  job.server.reset();  // the launcher ended: the thread sees PEER_LOST and ends by itself
  watcher.stop();      // joins a thread that has ended (or interrupts one about to)
}

void test_a_watcher_that_cannot_connect_ends_by_itself_or_when_stopped(void **) {
  Job job;
  StoreOptions o = job.options;
  InitMethod m = job.method;
  job.server.reset();  // nothing listens there any more
  pstest::TempDir dir;
  auto rec = recorder_in(dir.path());
  o.timeout_ms = 200;
  {
    DumpWatcher gives_up(o, m, *rec, Logger(LogLevel::kNone));  // its connect times out: the thread ends
  }
  o.timeout_ms = 60000;
  DumpWatcher retrying(o, m, *rec, Logger(LogLevel::kNone));
  retrying.stop();  // interrupts the connect's retries, at once
  assert_false(exists(dir.path() + "/rank0.pstate-trace"));
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_each_request_is_one_dump_with_its_reason_while_the_rank_records),
      cmocka_unit_test(test_a_late_rank_answers_an_earlier_request_and_a_replacement_does_not),
      cmocka_unit_test(test_the_watcher_thread_takes_no_signal_of_the_program),
      cmocka_unit_test(test_a_watcher_ends_when_its_store_goes_away),
      cmocka_unit_test(test_a_watcher_that_cannot_connect_ends_by_itself_or_when_stopped),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
