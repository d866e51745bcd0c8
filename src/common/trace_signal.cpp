// trace_signal.cpp — the flight recorder's watchdog thread: it keeps the recorder's cached clock
// (trace.hpp) fresh, and, where the program asked for it (PSTATE_TRACE_SIGNAL=1), SIGUSR1 asks it
// for a dump of every context of the process, also while the rank is blocked inside a pstate call
// or idle outside one.
//
// The handler is opt-in (asking for a dump must never disturb the program): a signal sent to a
// process interrupts the system calls of whichever program thread takes it (nanosleep returns
// early; poll, and reads without SA_RESTART, fail with EINTR), and a process that has not installed
// the handler yet is ended by it. Launchers ask for dumps through the job's store instead
// (group/dump_watcher.hpp), which touches no thread of the program; `kill -USR1` by hand, and
// `pstate run --dump-signal`, need PSTATE_TRACE_SIGNAL=1.
//
// A signal handler may not allocate or take locks, so it only writes one byte to a pipe; a
// watchdog thread blocked on the pipe's other end does the dumps (trace.cpp) of every recorder
// registered now. With PSTATE_TRACE_SIGNAL=1 the handler is installed with the first context of
// the process, and only over the default action (a program that handles SIGUSR1 itself keeps its
// handler: Go's runtime does). It stays installed (the pipe too) after the last context is gone,
// so a late SIGUSR1 never kills a rank that has finalized; the library's unloading restores the
// previous action. The watchdog thread runs while at least one context lives: it wakes every
// 2 ms (poll's timeout) to store the coarse clock, which costs the process ~0.1% of a core.
#include "common/trace.hpp"

#include "common/log.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace pstate {
namespace {

// Never destroyed: a process may exit with contexts never finalized, their watchdog still
// running. The thread is a plain pthread so that a forked child (which has none of the parent's
// threads) can forget it: the atfork handlers hold both mutexes across fork() and the child
// starts with no recorders and no thread (a context it makes starts its own).
struct SignalRoute {
  std::mutex lifecycle;  // start/stop of the thread (held while joining)
  std::mutex registry;   // the recorders (held while dumping)
  std::vector<TraceRecorder *> recorders;
  pthread_t watchdog{};
  bool running = false;
  bool installed = false;
  struct sigaction previous {};
};

// read end, write end (nonblocking); closed only in a forked child (which makes its own)
// (atomics: the signal handler reads the write end; a lock-free atomic is async-signal-safe)
std::atomic<int> g_pipe_r{-1}, g_pipe_w{-1};

void fork_prepare();
void fork_parent();
void fork_child();

SignalRoute *g_route = nullptr;  // made by the first registration, freed at unload when idle

SignalRoute &route() {
  static SignalRoute *r = [] {
    g_route = new SignalRoute;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    return g_route;
  }();
  return *r;
}

void fork_prepare() {
  route().lifecycle.lock();
  route().registry.lock();
}
void fork_parent() {
  route().registry.unlock();
  route().lifecycle.unlock();
}
void fork_child() {
  SignalRoute &s = route();
  s.recorders.clear();
  s.running = false;
  // The pipe is the parent's: its watchdog would read the child's bytes. The child makes its own.
  const int r = g_pipe_r.exchange(-1), w = g_pipe_w.exchange(-1);
  if (r >= 0) ::close(r);
  if (w >= 0) ::close(w);
  s.registry.unlock();
  s.lifecycle.unlock();
}

// The library's unloading (dlclose, or the end of the process) gives SIGUSR1 back to its previous
// action, so the handler never points into unloaded code, and frees the route unless a watchdog
// still runs (a context never finalized: the thread may still use it).
struct RestoreAtUnload {
  ~RestoreAtUnload() {
    SignalRoute *s = g_route;
    if (s == nullptr) return;  // never used: nothing to undo (and nothing made now)
    if (s->installed) ::sigaction(SIGUSR1, &s->previous, nullptr);
    if (!s->running) {
      g_route = nullptr;
      delete s;
    }
  }
} g_restore_at_unload;

void on_sigusr1(int) {
  const int saved = errno;
  const char b = 'u';
  const int w = g_pipe_w.load(std::memory_order_relaxed);
  if (w >= 0) (void)!::write(w, &b, 1);
  errno = saved;
}

void *watchdog_loop(void *) {
  for (;;) {
    g_trace_clock.ns.store(trace_coarse_now(), std::memory_order_relaxed);
    pollfd p{g_pipe_r.load(std::memory_order_relaxed), POLLIN, 0};
    int n = ::poll(&p, 1, 2);  // the clock's refresh period, ms
    if (n <= 0) continue;      // timeout, or EINTR
    char b = 0;
    ssize_t got = ::read(p.fd, &b, 1);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0 || b == 'q') return nullptr;
    std::lock_guard<std::mutex> lock(route().registry);
    for (TraceRecorder *r : route().recorders) {
      std::string error;
      if (r->dump_noexcept("SIGUSR1", &error).empty())
        Logger().warn("flight recorder: SIGUSR1 dump failed: ", error);
    }
  }
}

bool signal_wanted() {  // opt-in: see the top of this file
  const char *v = std::getenv("PSTATE_TRACE_SIGNAL");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace

void trace_register(TraceRecorder *r) {
  SignalRoute &s = route();
  std::lock_guard<std::mutex> life(s.lifecycle);
  bool first;
  {
    std::lock_guard<std::mutex> lock(s.registry);
    first = s.recorders.empty();
    s.recorders.push_back(r);
  }
  if (!first) return;
  g_trace_clock.ns.store(trace_coarse_now(), std::memory_order_relaxed);
  if (g_pipe_r.load() < 0) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
      Logger().warn("flight recorder: pipe2: ", std::strerror(errno),
                    ": no watchdog thread (its times stand still, no SIGUSR1 dumps)");
      return;
    }
    g_pipe_r.store(p[0]);
    g_pipe_w.store(p[1]);
  }
  if (!s.installed && signal_wanted()) {
    struct sigaction current {};
    ::sigaction(SIGUSR1, nullptr, &current);
    if (current.sa_handler == SIG_DFL && !(current.sa_flags & SA_SIGINFO)) {
      struct sigaction sa {};
      sa.sa_handler = on_sigusr1;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      if (::sigaction(SIGUSR1, &sa, &s.previous) == 0) s.installed = true;
    }
  }
  if (!s.running) {
    // All signals blocked in the thread, so a process-directed signal (SIGUSR1 included) is taken
    // by a thread of the program, as it would be without pstate.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    s.running = pthread_create(&s.watchdog, nullptr, watchdog_loop, nullptr) == 0;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (!s.running) Logger().warn("flight recorder: no watchdog thread (pthread_create failed)");
  }
}

void trace_unregister(TraceRecorder *r) {
  SignalRoute &s = route();
  std::lock_guard<std::mutex> life(s.lifecycle);
  bool last;
  {
    std::lock_guard<std::mutex> lock(s.registry);
    s.recorders.erase(std::remove(s.recorders.begin(), s.recorders.end(), r), s.recorders.end());
    last = s.recorders.empty();
  }
  if (!last || !s.running) return;
  const char q = 'q';
  // The pipe may be full of unanswered 'u's (nonblocking write end): the thread drains them
  // (each dumps nothing now) until it reads the 'q'.
  while (::write(g_pipe_w.load(), &q, 1) < 0 && (errno == EINTR || errno == EAGAIN)) std::this_thread::yield();
  pthread_join(s.watchdog, nullptr);
  s.running = false;
}

void TraceRecorderDeleter::operator()(TraceRecorder *r) const {
  trace_unregister(r);
  delete r;
}

TracePtr make_trace_recorder() {
  std::unique_ptr<TraceRecorder> r = TraceRecorder::from_env();
  if (!r) return nullptr;
  trace_register(r.get());
  return TracePtr(r.release());
}

}  // namespace pstate
