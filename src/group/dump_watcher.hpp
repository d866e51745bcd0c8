// dump_watcher.hpp — flight-recorder dumps asked for through the job's store, not by a signal, so
// that asking never disturbs the program (a signal interrupts its system calls, or ends a process
// without a handler).
//
// A launcher asked its ranks for their dumps with SIGUSR1, which ended a process that had no
// handler (a rank that failed before it loaded pstate, a program without pstate) and, in one
// that had, interrupted whichever program thread took it (nanosleep returns early, poll and
// reads without SA_RESTART fail with EINTR). torch's flight recorder asks through its store,
// which a watchdog thread polls; pstate does the same: any client of the job's store (`pstate
// run`) asks every rank with
//
//   n = add("pstate/dump/count", 1);  set("pstate/dump/<n>", why)
//
// and each context whose store is a TCP or an etcd store and whose flight recorder is on runs
// one DumpWatcher: a thread of pstate's own, with an observer connection of its own (rank -1: it
// claims no rank; the context's connection stays free for its calls, which a long get would
// block, since a Store serializes its calls), parked in get("pstate/dump/<n>"): the TCP server
// holds a parked get at no cost, and the get asks for hour-long slices, so an idle watcher costs
// the store one request an hour; on etcd the get is a watch, re-read every 30 s (one read a
// rank every 30 s, beside the watch). When the key appears it dumps the context's recorder (reason "a
// request through the store (<why>)") and waits for n + 1. A rank blocked inside a call and one
// idle in its own code dump alike; no signal, no handler, no thread of the program is touched (the
// thread blocks every signal, so none sent to the process lands in it).
//
// Starting one costs pstate_init a thread, no store traffic: the thread connects by itself. A rank
// of a new job answers every request of the job, also one made before its watcher was up (the
// rank was late, and the launcher waits for its dump); a replacement (pstate run --respawn) starts
// after the requests the store counts when it joins (Context reads the count), so it does not
// answer for the rank it replaces. stop() (context teardown: finalize, abort, a failed
// pstate_init) interrupts the thread's connect or parked get (TcpStore::interrupt: the socket is
// shut down; EtcdStore::interrupt: curl's wait is woken) and joins it: at once. When a TCP store
// goes away (the launcher ended, the rank serving it died) the thread ends by itself; so does one
// that cannot connect within the options' timeout (a warning, unless the store has failed the
// job: the rank says that itself). An etcd cluster out of reach is not the end: it is a
// replicated store that comes back, so the thread asks again until it does or stop().
//
// File stores have no watcher (no server to park a get at): their ranks dump on a failed call,
// on pstate_trace_dump and, with PSTATE_TRACE_SIGNAL=1, on SIGUSR1 (trace_signal.cpp).
#pragma once

#include "bootstrap/init_method.hpp"
#include "bootstrap/store.hpp"
#include "common/log.hpp"
#include "common/trace.hpp"

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace pstate {

class DumpWatcher {
 public:
  static constexpr const char *kCountKey = "pstate/dump/count";
  // "pstate/dump/<n>": the key of the n-th request (n = 1, 2, ...).
  static std::string request_key(int64_t n);
  // The dump reason of a request whose value is `why`.
  static std::string reason_of(const Bytes &why);

  // Starts the thread, which connects as an observer to the store named by `method` (tcp:// or
  // etcd://; INVALID_ARGUMENT for another kind) (options:
  // the context's, rank and serving overridden; the connect bounded by options.timeout_ms) and
  // answers the requests from number first_request on. `trace` must outlive the watcher.
  DumpWatcher(StoreOptions options, const InitMethod &method, TraceRecorder &trace, const Logger &log,
              int64_t first_request = 1);
  ~DumpWatcher();  // stop()
  DumpWatcher(const DumpWatcher &) = delete;
  DumpWatcher &operator=(const DumpWatcher &) = delete;

  // Interrupts the thread's wait and joins it; idempotent. Not from the watcher's own thread. In
  // a forked child (which has no copy of the thread, and shares the connection with its parent)
  // it only lets go of the thread: the parent's watcher goes on.
  void stop() noexcept;

 private:
  void run() noexcept;

  std::unique_ptr<Store> store_;
  bool replicated_ = false;  // an etcd store: out of reach is not gone
  int64_t connect_ms_;
  TraceRecorder &trace_;
  Logger log_;
  int64_t next_ = 1;  // the request the thread waits for
  pid_t owner_;       // the process that started the thread
  std::thread thread_;
};

}  // namespace pstate
