// trace_signal.cpp — the flight recorder's watchdog thread: it keeps the recorder's cached clock
// (trace.hpp) fresh, and SIGUSR1 asks it for a dump of every context of the process, also while
// the rank is blocked inside a pstate call or idle outside one (issue 14).
//
// A signal handler may not allocate or take locks, so it only writes one byte to a pipe; a
// watchdog thread blocked on the pipe's other end does the dumps (trace.cpp) of every recorder
// registered now. The handler is installed with the first context of the process, and only over
// the default action (a program that handles SIGUSR1 itself keeps its handler: Go's runtime does,
// so Go programs dump on failures and pstate_trace_dump only), unless PSTATE_TRACE_SIGNAL=0. It
// stays installed (the pipe too) after the last context is gone, so a late SIGUSR1 from
// `pstate run` never kills a rank that has finalized; the library's unloading restores the
// previous action. The watchdog thread runs while at least one context lives: it wakes every
// 2 ms (poll's timeout) to store the coarse clock, which costs the process ~0.1% of a core.
#include "common/trace.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <thread>
#include <unistd.h>

namespace pstate {
namespace {

// Never destroyed: a process may exit with contexts never finalized, their watchdog still
// running (a joinable std::thread destroyed at exit would terminate the process).
struct SignalRoute {
  std::mutex lifecycle;  // start/stop of the thread (held while joining)
  std::mutex registry;   // the recorders (held while dumping)
  std::vector<TraceRecorder *> recorders;
  std::thread watchdog;
  bool installed = false;
  struct sigaction previous {};
};

SignalRoute &route() {
  static SignalRoute *r = new SignalRoute;
  return *r;
}

// The library's unloading (dlclose) gives SIGUSR1 back to its previous action, so the handler
// never points into unloaded code.
struct RestoreAtUnload {
  ~RestoreAtUnload() {
    SignalRoute &s = route();
    if (s.installed) ::sigaction(SIGUSR1, &s.previous, nullptr);
  }
} g_restore_at_unload;

int g_pipe[2] = {-1, -1};  // read end, write end (nonblocking); never closed once made

void on_sigusr1(int) {
  const int saved = errno;
  const char b = 'u';
  if (g_pipe[1] >= 0) (void)!::write(g_pipe[1], &b, 1);
  errno = saved;
}

void watchdog_loop() {
  for (;;) {
    g_trace_clock.ns.store(trace_coarse_now(), std::memory_order_relaxed);
    pollfd p{g_pipe[0], POLLIN, 0};
    int n = ::poll(&p, 1, 2);  // the clock's refresh period, ms
    if (n <= 0) continue;      // timeout, or EINTR
    char b = 0;
    ssize_t got = ::read(g_pipe[0], &b, 1);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0 || b == 'q') return;
    std::lock_guard<std::mutex> lock(route().registry);
    for (TraceRecorder *r : route().recorders) {
      std::string error;
      if (r->dump_noexcept("SIGUSR1", &error).empty())
        std::fprintf(stderr, "[pstate] WARN flight recorder: SIGUSR1 dump failed: %s\n", error.c_str());
    }
  }
}

bool signal_wanted() {
  const char *v = std::getenv("PSTATE_TRACE_SIGNAL");
  return v == nullptr || std::strcmp(v, "0") != 0;
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
  if (g_pipe[0] < 0) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
      std::fprintf(stderr, "[pstate] WARN flight recorder: pipe2: %s: no watchdog thread (its times stand still, "
                   "no SIGUSR1 dumps)\n", std::strerror(errno));
      return;
    }
    g_pipe[0] = p[0];
    g_pipe[1] = p[1];
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
  if (!s.watchdog.joinable()) s.watchdog = std::thread(watchdog_loop);
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
  if (!last || !s.watchdog.joinable()) return;
  const char q = 'q';
  // The pipe may be full of unanswered 'u's (nonblocking write end): the thread drains them
  // (each dumps nothing now) until it reads the 'q'.
  while (::write(g_pipe[1], &q, 1) < 0 && (errno == EINTR || errno == EAGAIN)) std::this_thread::yield();
  s.watchdog.join();
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
