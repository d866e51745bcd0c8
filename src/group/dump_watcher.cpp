// dump_watcher.cpp — the thread that dumps a context's flight recorder when a dump is asked for
// through the job's store (see dump_watcher.hpp).
#include "group/dump_watcher.hpp"

#include "bootstrap/tcp_store.hpp"
#include "bootstrap/wire.hpp"
#include "common/error.hpp"
#ifdef PSTATE_HAVE_ETCD
#include "bootstrap/etcd_store.hpp"
#endif

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string_view>
#include <thread>

namespace pstate {
namespace {

// How long each parked get lasts before the client sends the next one: the store's only cost
// of an idle watcher.
constexpr int64_t kSliceMs = 3600 * 1000;
// On etcd: how long the get's watch lasts before it reads again (a member that went silent is
// left for another then).
constexpr int64_t kEtcdSliceMs = 30 * 1000;
// The longest request text a dump's reason carries.
constexpr size_t kMaxWhy = 200;

}  // namespace

std::string DumpWatcher::request_key(int64_t n) { return cat("pstate/dump/", n); }

std::string DumpWatcher::reason_of(const Bytes &why) {
  std::string text;
  for (size_t i = 0; i < why.size() && text.size() < kMaxWhy; ++i) {
    const unsigned char c = why[i];
    text += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : ' ';
  }
  return text.empty() ? "a request through the store" : cat("a request through the store (", text, ")");
}

DumpWatcher::DumpWatcher(StoreOptions options, const InitMethod &method, TraceRecorder &trace, const Logger &log,
                         int64_t first_request)
    : connect_ms_(options.timeout_ms), trace_(trace), log_(log), next_(first_request), owner_(::getpid()) {
  options.rank = -1;  // an observer: claims no rank
  options.serve = false;
  Logger quiet(LogLevel::kNone);  // its connect and progress lines would only repeat the context's
  if (method.kind == InitMethod::Kind::kTcp) {
    auto tcp = TcpStore::open_unconnected(options, method, quiet);
    tcp->set_wait_slice_ms(kSliceMs);
    store_ = std::move(tcp);
  }
#ifdef PSTATE_HAVE_ETCD
  if (method.kind == InitMethod::Kind::kEtcd) {
    auto etcd = EtcdStore::open_unconnected(options, method, quiet);
    etcd->set_wait_slice_ms(kEtcdSliceMs);
    store_ = std::move(etcd);
    replicated_ = true;
  }
#endif
  if (!store_)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "flight recorder: dumps on request need a tcp:// or etcd:// store, not ",
                method.url());
  // Every signal blocked in the thread (it inherits the mask), so that a signal sent to the
  // process is taken by a thread of the program, as it would be without pstate (trace_signal.cpp's
  // watchdog does the same).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

DumpWatcher::~DumpWatcher() { stop(); }

void DumpWatcher::stop() noexcept {
  if (!thread_.joinable()) return;
  if (::getpid() != owner_) {  // a forked child: the thread is the parent's, and so is the socket
    thread_.detach();
    return;
  }
  store_->interrupt();
  thread_.join();
}

void DumpWatcher::run() noexcept {
  try {
#ifdef PSTATE_HAVE_ETCD
    if (auto *etcd = dynamic_cast<EtcdStore *>(store_.get())) etcd->connect(Deadline::after_ms(connect_ms_));
#endif
    store_->check(kCountKey, Deadline::after_ms(connect_ms_));  // connects: bounded, unlike the waits
  } catch (const Error &e) {
    // ABORTED: stop() came first. A store that failed the job: the rank's init says why.
    const bool job_failed = std::string_view(e.what()).find(wire::kJobFailedPrefix) != std::string_view::npos;
    if (e.status() != PSTATE_ERR_ABORTED && !job_failed)
      log_.warn("flight recorder: no dumps on request through the store (", e.what(),
                "); it still dumps when a call fails and on pstate_trace_dump");
    return;
  }
  for (;;) {
    Bytes why;
    try {
      why = store_->get(request_key(next_), Deadline::never());
    } catch (const Error &e) {
      if (e.status() == PSTATE_ERR_TIMEOUT) continue;  // the store did not answer in time: ask again
      if (replicated_ && e.status() == PSTATE_ERR_PEER_LOST) {  // etcd out of reach: it comes back
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      if (e.status() != PSTATE_ERR_ABORTED)         // ABORTED: stop() interrupted it
        log_.info("flight recorder: no more dumps on request through the store: ", e.what());
      return;
    } catch (const std::exception &e) {
      log_.warn("flight recorder: no more dumps on request through the store: ", e.what());
      return;
    }
    std::string error;
    const std::string file = trace_.dump_noexcept(reason_of(why), &error);
    if (file.empty())
      log_.warn("flight recorder: the dump asked for through the store could not be written: ", error);
    else
      log_.info("flight recorder: dump ", next_, " asked for through the store written to ", file);
    ++next_;
  }
}

}  // namespace pstate
